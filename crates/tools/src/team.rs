//! `team_list`, `team_get`, `team_add`, `team_update`, `team_remove` over the overlay's
//! `config/team.json`.
//!
//! Every write waits for a human's approval (`hitl`: who is on the team decides who may talk
//! to the agents and with which tools), and a change of tier — a person's `access`, an
//! agent's `agent_tier`, or adding someone above staff — is refused unless the caller is an
//! owner. Writes are atomic (temp file, fsync, rename) and serialised within the process.
//! The running access policy is built at start: changes apply from the next start.
//!
//! The writes honour their idempotency key by being states, not increments: run again after
//! a crash (`ToolContext::is_resumed_call`), an add that finds the member it would add, an
//! update that finds the values it would set, and a remove that finds nobody to remove
//! report what the first run did and write nothing.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use strata_engine::access::Tier;
use strata_engine::config::{Access, AgentTier, Person, TeamAgent, TeamConfig};
use strata_engine::schemars::JsonSchema;
use strata_engine::{ToolContext, ToolError, tool};

static WRITE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NOTE: &str = "saved to config/team.json; the access policy picks it up at the next start";

fn path(ctx: &ToolContext) -> PathBuf {
    ctx.env.overlay_dir.join("config/team.json")
}

/// The team as the file says now (the running config when there is no file yet).
fn load(ctx: &ToolContext) -> Result<TeamConfig, ToolError> {
    let p = path(ctx);
    match std::fs::read_to_string(&p) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| {
            ToolError::failed(format!("{} is not a valid team file: {e}", p.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ctx.env.config.team.clone()),
        Err(e) => Err(ToolError::failed(format!("{}: {e}", p.display()))),
    }
}

fn save(p: &Path, team: &TeamConfig) -> Result<(), ToolError> {
    let fail = |e: std::io::Error| ToolError::failed(format!("writing {}: {e}", p.display()));
    let dir = p.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(fail)?;
    let mut text = serde_json::to_string_pretty(team)
        .map_err(|e| ToolError::failed(format!("encoding the team: {e}")))?;
    text.push('\n');
    let tmp = dir.join(format!(".team.json.{}.tmp", uuid::Uuid::new_v4().simple()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        if let Ok(meta) = std::fs::metadata(p) {
            f.set_permissions(meta.permissions())?;
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, p)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(e)
    })
}

fn check_id(id: &str) -> Result<(), ToolError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(ToolError::invalid(
            "id",
            "1–64 characters of letters, digits, `-`, `_`, `.`",
        ))
    }
}

fn require_owner(ctx: &ToolContext, what: &str) -> Result<(), ToolError> {
    let policy = &ctx.policy;
    if policy.tier(&ctx.principal) == Tier::Person(Access::Owner) {
        Ok(())
    } else {
        Err(ToolError::failed(format!(
            "denied: only an owner may {what} ({} is {})",
            ctx.principal,
            policy.tier(&ctx.principal)
        )))
    }
}

/// Person or agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
#[schemars(crate = "strata_engine::schemars")]
pub enum Kind {
    /// A person.
    Person,
    /// An agent.
    Agent,
}

/// Lists the team: people (id, name, access tier, contact ids per connector), agents (id,
/// tier) and the connector ids treated as owners.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 10)]
async fn team_list(ctx: &ToolContext) -> Result<TeamConfig, ToolError> {
    load(ctx)
}

/// One member of the team by id: a person or an agent.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 10)]
async fn team_get(
    ctx: &ToolContext,
    /// The person's or agent's id.
    id: String,
) -> Result<Value, ToolError> {
    let team = load(ctx)?;
    if let Some(p) = team.people.iter().find(|p| p.id == id) {
        return Ok(json!({"kind": "person", "person": p}));
    }
    if let Some(a) = team.agents.iter().find(|a| a.id == id) {
        return Ok(json!({"kind": "agent", "agent": a}));
    }
    Err(ToolError::invalid(
        "id",
        format!("nobody with id `{id}` on the team"),
    ))
}

/// Adds a person (name and access required) or an agent (agent_tier required) to the team.
/// Needs a human's approval; adding anyone above staff needs an owner.
#[tool(capabilities = [file_write], side_effects = local, hitl, idempotent, timeout_secs = 10)]
async fn team_add(
    ctx: &ToolContext,
    /// person or agent.
    kind: Kind,
    /// A new, unique id.
    id: String,
    /// Display name (people).
    name: Option<String>,
    /// owner, admin, staff or viewer (people).
    access: Option<Access>,
    /// privileged, coordinator or assistant (agents).
    agent_tier: Option<AgentTier>,
    /// Ids per connector, e.g. {"discord": "123"} (people).
    contacts: Option<BTreeMap<String, String>>,
) -> Result<Value, ToolError> {
    check_id(&id)?;
    let _g = WRITE.lock().await;
    let mut team = load(ctx)?;
    let taken = team.people.iter().any(|p| p.id == id) || team.agents.iter().any(|a| a.id == id);
    let before = taken.then(|| team.clone());
    let entry = match kind {
        Kind::Person => {
            let name = name
                .filter(|n| !n.trim().is_empty())
                .ok_or_else(|| ToolError::invalid("name", "required for a person"))?;
            let access =
                access.ok_or_else(|| ToolError::invalid("access", "required for a person"))?;
            if agent_tier.is_some() {
                return Err(ToolError::invalid("agent_tier", "only for agents"));
            }
            if matches!(access, Access::Owner | Access::Admin) {
                require_owner(ctx, "add an owner or admin")?;
            }
            let p = Person {
                id: id.clone(),
                name,
                access,
                contacts: contacts.unwrap_or_default(),
                budget: None,
                role: None,
                timezone: None,
            };
            team.people.push(p.clone());
            json!({"kind": "person", "person": p})
        }
        Kind::Agent => {
            let tier = agent_tier
                .ok_or_else(|| ToolError::invalid("agent_tier", "required for an agent"))?;
            if access.is_some() || contacts.is_some() {
                return Err(ToolError::invalid(
                    "access",
                    "access and contacts are for people",
                ));
            }
            if tier != AgentTier::Assistant {
                require_owner(ctx, "add a privileged or coordinator agent")?;
            }
            let a = TeamAgent {
                id: id.clone(),
                agent_tier: tier,
            };
            team.agents.push(a.clone());
            json!({"kind": "agent", "agent": a})
        }
    };
    if let Some(before) = before {
        // Run again after a crash: the first run added exactly this member.
        let same = match &entry["kind"] {
            k if k == "person" => before.people.iter().any(|p| json!(p) == entry["person"]),
            _ => before.agents.iter().any(|a| json!(a) == entry["agent"]),
        };
        if ctx.is_resumed_call() && same {
            return Ok(json!({"added": entry, "note": NOTE}));
        }
        return Err(ToolError::invalid(
            "id",
            format!("`{id}` is already on the team"),
        ));
    }
    save(&path(ctx), &team)?;
    Ok(json!({"added": entry, "note": NOTE}))
}

/// Changes a team member: a person's name, access or contacts (contacts replace the old
/// ones), an agent's tier. Needs a human's approval; changing a tier needs an owner.
#[tool(capabilities = [file_write], side_effects = local, hitl, idempotent, timeout_secs = 10)]
async fn team_update(
    ctx: &ToolContext,
    /// The person's or agent's id.
    id: String,
    /// New display name (people).
    name: Option<String>,
    /// New access tier (people; owner only).
    access: Option<Access>,
    /// New agent tier (agents; owner only).
    agent_tier: Option<AgentTier>,
    /// New contact ids per connector (people).
    contacts: Option<BTreeMap<String, String>>,
) -> Result<Value, ToolError> {
    let _g = WRITE.lock().await;
    let mut team = load(ctx)?;
    let before;
    let after;
    if let Some(p) = team.people.iter_mut().find(|p| p.id == id) {
        if agent_tier.is_some() {
            return Err(ToolError::invalid("agent_tier", "`{id}` is a person"));
        }
        if name.is_none() && access.is_none() && contacts.is_none() {
            return Err(ToolError::invalid("id", "nothing to change"));
        }
        before = json!(p);
        if let Some(a) = access
            && a != p.access
        {
            require_owner(ctx, "change a person's access tier")?;
            p.access = a;
        }
        if let Some(n) = name.filter(|n| !n.trim().is_empty()) {
            p.name = n;
        }
        if let Some(c) = contacts {
            p.contacts = c;
        }
        after = json!(p);
    } else if let Some(a) = team.agents.iter_mut().find(|a| a.id == id) {
        if access.is_some() || name.is_some() || contacts.is_some() {
            return Err(ToolError::invalid(
                "access",
                format!("`{id}` is an agent: only agent_tier can change"),
            ));
        }
        let tier =
            agent_tier.ok_or_else(|| ToolError::invalid("agent_tier", "nothing to change"))?;
        before = json!(a);
        if tier != a.agent_tier {
            require_owner(ctx, "change an agent's tier")?;
            a.agent_tier = tier;
        }
        after = json!(a);
    } else {
        return Err(ToolError::invalid(
            "id",
            format!("nobody with id `{id}` on the team"),
        ));
    }
    // Setting what is already there (a call run again after a crash) writes nothing.
    if before != after {
        save(&path(ctx), &team)?;
    }
    Ok(json!({"before": before, "after": after, "note": NOTE}))
}

/// Removes a person or an agent from the team. Needs a human's approval; removing an owner
/// needs an owner, and the last owner cannot be removed.
#[tool(capabilities = [file_write], side_effects = local, hitl, idempotent, timeout_secs = 10)]
async fn team_remove(
    ctx: &ToolContext,
    /// The person's or agent's id.
    id: String,
) -> Result<Value, ToolError> {
    let _g = WRITE.lock().await;
    let mut team = load(ctx)?;
    let removed = if let Some(i) = team.people.iter().position(|p| p.id == id) {
        if team.people[i].access == Access::Owner {
            require_owner(ctx, "remove an owner")?;
            if team
                .people
                .iter()
                .filter(|p| p.access == Access::Owner)
                .count()
                == 1
            {
                return Err(ToolError::failed(
                    "refused: that is the last owner; add another owner first",
                ));
            }
        }
        json!({"kind": "person", "person": team.people.remove(i)})
    } else if let Some(i) = team.agents.iter().position(|a| a.id == id) {
        json!({"kind": "agent", "agent": team.agents.remove(i)})
    } else if ctx.is_resumed_call() {
        // Run again after a crash: the first run removed them.
        return Ok(json!({"removed": {"id": id}, "note": NOTE}));
    } else {
        return Err(ToolError::invalid(
            "id",
            format!("nobody with id `{id}` on the team"),
        ));
    };
    save(&path(ctx), &team)?;
    Ok(json!({"removed": removed, "note": NOTE}))
}
