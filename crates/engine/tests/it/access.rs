//! Access control: the tier × tier matrices of layers 1 and 2, layer-3 ceilings, and the
//! Invoker re-checking a tool the model was never shown.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;
use strata_engine::access::{AccessPolicy, Decision};
use strata_engine::audit::NoAudit;
use strata_engine::config::{
    Access, AgentConfig, AgentTier, AllTools, Config, Person, TeamAgent, ToolSelection,
    UnknownPolicy,
};
use strata_engine::{Capability, Env, Principal, SideEffects, ToolOutput, ToolSpec};
use strata_runtime::{Invocation, Invoker, Registry, Status};

fn person(id: &str, access: Access) -> Person {
    Person {
        id: id.into(),
        name: format!("{id} example"),
        access,
        contacts: BTreeMap::from([("discord".into(), format!("{id}-snowflake"))]),
        budget: None,
        role: None,
        timezone: None,
    }
}

/// A team with one person per tier and one agent per tier.
fn config() -> Config {
    let mut c = Config::default();
    c.team.people = vec![
        person("olivia", Access::Owner),
        person("adam", Access::Admin),
        person("sam", Access::Staff),
        person("vic", Access::Viewer),
    ];
    c.team.admin_users = vec!["boss-snowflake".into()];
    c.team.agents = vec![
        TeamAgent {
            id: "prime".into(),
            agent_tier: AgentTier::Privileged,
        },
        TeamAgent {
            id: "coord".into(),
            agent_tier: AgentTier::Coordinator,
        },
        TeamAgent {
            id: "helper".into(),
            agent_tier: AgentTier::Assistant,
        },
    ];
    for id in ["prime", "coord", "helper"] {
        c.agents.insert(
            id.into(),
            AgentConfig {
                tools: Some(ToolSelection::All(AllTools::All)),
                ..Default::default()
            },
        );
    }
    c.security.access_control.safe_tools = vec!["safe_*".into()];
    c.security.access_control.inter_agent_tools = vec!["ask_agent".into()];
    c
}

fn p(id: &str) -> Principal {
    Principal::Person { id: id.into() }
}

fn agent(id: &str) -> Principal {
    Principal::Agent { id: id.into() }
}

fn senders() -> Vec<(&'static str, Principal)> {
    vec![
        ("owner", p("olivia")),
        ("admin", p("adam")),
        ("staff", p("sam")),
        ("viewer", p("vic")),
        ("unknown", p("stranger")),
        ("privileged", agent("prime")),
        ("coordinator", agent("coord")),
        ("assistant", agent("helper")),
    ]
}

#[test]
fn principals_resolve_from_the_team() {
    let pol = AccessPolicy::from_config(&config());
    use strata_engine::access::Tier;
    assert_eq!(pol.tier(&p("olivia")), Tier::Person(Access::Owner));
    // Contact ids, bare or with the connector prefix, resolve to the person.
    assert_eq!(pol.tier(&p("sam-snowflake")), Tier::Person(Access::Staff));
    assert_eq!(
        pol.tier(&p("discord:sam-snowflake")),
        Tier::Person(Access::Staff)
    );
    // admin_users are owners.
    assert_eq!(
        pol.tier(&p("discord:boss-snowflake")),
        Tier::Person(Access::Owner)
    );
    assert_eq!(pol.tier(&p("nobody")), Tier::Unknown);
    assert_eq!(pol.tier(&Principal::Unknown), Tier::Unknown);
    assert_eq!(
        pol.tier(&agent("prime")),
        Tier::Agent(AgentTier::Privileged)
    );
    // Agents missing from team.json are assistants.
    assert_eq!(
        pol.tier(&agent("newbie")),
        Tier::Agent(AgentTier::Assistant)
    );
    assert_eq!(
        pol.tier(&Principal::Token {
            name: "ci".into(),
            tier: Access::Admin
        }),
        Tier::Person(Access::Admin)
    );
    assert_eq!(pol.tier(&Principal::Operator), Tier::Person(Access::Owner));
}

#[test]
fn layer_1_matrix() {
    let targets = ["prime", "coord", "helper"];
    // sender → may talk to (privileged, coordinator, assistant)
    let expected: &[(&str, [bool; 3])] = &[
        ("owner", [true, true, true]),
        ("admin", [true, true, true]),
        ("staff", [false, false, true]),
        ("viewer", [false, false, true]),
        ("unknown", [false, false, false]),
        ("privileged", [true, true, true]),
        ("coordinator", [true, true, true]),
        ("assistant", [false, false, false]),
    ];
    let pol = AccessPolicy::from_config(&config());
    for ((name, sender), (ename, row)) in senders().into_iter().zip(expected) {
        assert_eq!(name, *ename);
        for (target, want) in targets.iter().zip(row) {
            let got = pol.may_talk(&sender, target);
            assert_eq!(got.is_ok(), *want, "{name} → {target}: {got:?}");
            if let Err(e) = got {
                assert!(e.to_string().starts_with("denied (layer 1)"), "{e}");
            }
        }
    }
    // Under safe_only, unknown senders reach assistant agents only.
    let mut c = config();
    c.security.access_control.unknown_policy = UnknownPolicy::SafeOnly;
    let pol = AccessPolicy::from_config(&c);
    assert!(pol.may_talk(&p("stranger"), "helper").is_ok());
    assert!(pol.may_talk(&p("stranger"), "prime").is_err());
}

fn spec(name: &str) -> ToolSpec {
    ToolSpec::new(name, "test", json!({"type": "object"}))
}

#[derive(Debug, PartialEq, Clone, Copy)]
enum D {
    Allow,
    Approve,
    Deny,
}

fn kind(d: &Decision) -> D {
    match d {
        Decision::Allow => D::Allow,
        Decision::Approve(_) => D::Approve,
        Decision::Deny { .. } => D::Deny,
    }
}

#[test]
fn layer_2_matrix() {
    let safe = spec("safe_clock");
    let mut safe_writer = spec("safe_note");
    safe_writer.side_effects = SideEffects::Local;
    let plain = spec("deploy");
    let mut gated = spec("wire_money");
    gated.hitl = true;
    let inter = spec("ask_agent");
    use D::*;
    // sender → (safe, safe with side effects, plain, gated, inter-agent); acting agent: prime.
    let expected: &[(&str, [D; 5])] = &[
        ("owner", [Allow, Allow, Allow, Approve, Allow]),
        ("admin", [Allow, Allow, Allow, Approve, Allow]),
        ("staff", [Allow, Allow, Deny, Deny, Deny]),
        ("viewer", [Allow, Deny, Deny, Deny, Deny]),
        ("unknown", [Deny, Deny, Deny, Deny, Deny]),
        ("privileged", [Allow, Allow, Approve, Approve, Approve]),
        ("coordinator", [Allow, Allow, Approve, Approve, Approve]),
        ("assistant", [Allow, Allow, Approve, Approve, Deny]),
    ];
    let pol = AccessPolicy::from_config(&config());
    for ((name, sender), (ename, row)) in senders().into_iter().zip(expected) {
        assert_eq!(name, *ename);
        for (s, want) in [&safe, &safe_writer, &plain, &gated, &inter]
            .iter()
            .zip(row)
        {
            let d = pol.decide(&sender, Some("prime"), s);
            assert_eq!(kind(&d), *want, "{name} calling {}: {d:?}", s.name);
            if let Decision::Deny { layer, .. } = d {
                assert_eq!(layer, 2, "{name} calling {}", s.name);
            }
        }
    }
    // safe_only opens safe tools to unknown senders, nothing else.
    let mut c = config();
    c.security.access_control.unknown_policy = UnknownPolicy::SafeOnly;
    let pol = AccessPolicy::from_config(&c);
    assert_eq!(kind(&pol.decide(&p("stranger"), None, &safe)), Allow);
    assert_eq!(kind(&pol.decide(&p("stranger"), None, &plain)), Deny);
    // gated_tools patterns gate like the hitl flag; owner_bypass lets owners through.
    let mut c = config();
    c.security.hitl.gated_tools = vec!["dep*".into()];
    let pol = AccessPolicy::from_config(&c);
    assert_eq!(kind(&pol.decide(&p("olivia"), None, &plain)), Approve);
    c.security.hitl.owner_bypass = true;
    let pol = AccessPolicy::from_config(&c);
    assert_eq!(kind(&pol.decide(&p("olivia"), None, &plain)), Allow);
    assert_eq!(kind(&pol.decide(&p("adam"), None, &plain)), Approve);
}

#[test]
fn layer_3_ceilings() {
    let mut c = config();
    c.agents.insert(
        "narrow".into(),
        AgentConfig {
            tools: Some(ToolSelection::List(vec!["read_*".into(), "shell".into()])),
            ..Default::default()
        },
    );
    c.agents.insert(
        "ops".into(),
        AgentConfig {
            tools: Some(ToolSelection::All(AllTools::All)),
            capabilities: Some(vec![Capability::Read, Capability::Subprocess]),
            ..Default::default()
        },
    );
    c.agents.insert("mute".into(), AgentConfig::default());
    let pol = AccessPolicy::from_config(&c);
    let owner = p("olivia");
    let read = spec("read_log");
    let mut shell = spec("shell");
    shell.capabilities = vec![Capability::Subprocess];
    let write = spec("write_file");
    let deny3 = |d: Decision| matches!(d, Decision::Deny { layer: 3, .. });
    // The tools list.
    assert_eq!(pol.decide(&owner, Some("narrow"), &read), Decision::Allow);
    assert!(deny3(pol.decide(&owner, Some("narrow"), &write)));
    // No tools list: no tools.
    assert!(deny3(pol.decide(&owner, Some("mute"), &read)));
    // Capabilities: subprocess only when granted.
    let d = pol.decide(&owner, Some("narrow"), &shell);
    assert!(deny3(d.clone()), "{d:?}");
    assert!(format!("{d:?}").contains("subprocess"), "{d:?}");
    assert_eq!(pol.decide(&owner, Some("ops"), &shell), Decision::Allow);
    // Assistant-tier agents never use inter-agent tools, even for an owner.
    assert!(deny3(pol.decide(
        &owner,
        Some("helper"),
        &spec("ask_agent")
    )));
    assert_eq!(
        pol.decide(&owner, Some("coord"), &spec("ask_agent")),
        Decision::Allow
    );
}

#[test]
fn access_control_can_be_switched_off_but_gates_remain() {
    let mut c = config();
    c.security.access_control.enabled = false;
    let pol = AccessPolicy::from_config(&c);
    assert!(pol.may_talk(&p("stranger"), "prime").is_ok());
    assert_eq!(
        pol.decide(&p("stranger"), None, &spec("deploy")),
        Decision::Allow
    );
    let mut gated = spec("deploy");
    gated.hitl = true;
    assert!(matches!(
        pol.decide(&p("stranger"), None, &gated),
        Decision::Approve(_)
    ));
}

fn invoker_with(c: Config) -> Arc<Invoker> {
    let dir = std::env::temp_dir();
    let env = Arc::new(Env::new(c, dir.clone(), dir.join("data")));
    let reg = Arc::new(Registry::from_inventory(&[]).expect("registry"));
    reg.register(spec("deploy"), |_, _| async {
        Ok(ToolOutput(json!("deployed")))
    })
    .expect("register");
    reg.register(spec("safe_clock"), |_, _| async {
        Ok(ToolOutput(json!("noon")))
    })
    .expect("register");
    Arc::new(Invoker::new(reg, env, Arc::new(NoAudit)))
}

#[tokio::test]
async fn the_invoker_rechecks_every_call() {
    let inv = invoker_with(config());
    // Staff through any surface: the safe tool runs, the other is denied with its layer.
    let r = inv
        .invoke(Invocation::new("safe_clock", json!({}), p("sam")))
        .await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let r = inv
        .invoke(Invocation::new("deploy", json!({}), p("sam")))
        .await;
    assert_eq!(r.status, Status::Denied);
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.starts_with("denied (layer 2)")),
        "{r:?}"
    );
    // An agent call for an agent whose ceiling excludes the tool: layer 3.
    let mut c = config();
    c.agents.insert(
        "narrow".into(),
        AgentConfig {
            tools: Some(ToolSelection::List(vec!["safe_clock".into()])),
            ..Default::default()
        },
    );
    let inv = invoker_with(c);
    let mut call = Invocation::new("deploy", json!({}), p("olivia"));
    call.agent_id = Some("narrow".into());
    let r = inv.invoke(call).await;
    assert_eq!(r.status, Status::Denied);
    assert!(
        r.error
            .as_deref()
            .is_some_and(|e| e.starts_with("denied (layer 3)")),
        "{r:?}"
    );
}
