//! The Mind: a small Directus REST client and the tools over it.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use strata_engine::schemars::JsonSchema;
use strata_engine::secret::Secret;
use strata_engine::{ToolContext, ToolError, tool};
use url::Url;

/// Largest response body read from The Mind.
const MAX_RESPONSE: usize = 4 << 20;

/// A client for one Mind.
pub struct Mind {
    base: Url,
    token: Secret,
    client: reqwest::Client,
}

impl std::fmt::Debug for Mind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mind")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl Mind {
    /// The Mind this deployment configures, with its token resolved.
    pub fn from_ctx(ctx: &ToolContext) -> Result<Mind, ToolError> {
        let cfg = crate::config(ctx)?;
        let raw = cfg.mind_url.as_deref().filter(|u| !u.trim().is_empty()).ok_or_else(|| {
            ToolError::failed("The Mind is not configured: set `modules.fleet.mind_url` (and the vault key `mind-token`)")
        })?;
        let base = Url::parse(raw.trim())
            .map_err(|e| ToolError::failed(format!("modules.fleet.mind_url `{raw}`: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(ToolError::failed(format!(
                "modules.fleet.mind_url `{raw}` must be an http(s) URL with a host"
            )));
        }
        let token = strata_engine::secret::resolve_ref(
            &cfg.mind_token,
            ctx.env.vault.as_deref(),
            "modules.fleet.mind_token",
        )
        .map_err(ToolError::failed)?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(cfg.timeout_secs.clamp(1, 600)))
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| ToolError::failed(format!("http client: {e}")))?;
        Ok(Mind {
            base,
            token,
            client,
        })
    }

    /// The URL of `endpoint`: a path (`/items/x?limit=5`) under the base URL, or a full URL
    /// on the Mind's own origin. Full URLs to other hosts are refused (the token would go
    /// with them).
    pub fn url(&self, endpoint: &str) -> Result<Url, ToolError> {
        let e = endpoint.trim();
        if e.is_empty() {
            return Err(ToolError::invalid("endpoint", "must not be empty"));
        }
        if let Ok(full) = Url::parse(e) {
            if full.origin() != self.base.origin() {
                return Err(ToolError::invalid(
                    "endpoint",
                    format!(
                        "`{e}` is a full URL to another host; give a path on The Mind such as /items/fleet_notes"
                    ),
                ));
            }
            return Ok(full);
        }
        if e.starts_with("//") || e.contains('\\') {
            return Err(ToolError::invalid(
                "endpoint",
                "give a path such as /items/fleet_notes",
            ));
        }
        let (path, query) = match e.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (e, None),
        };
        if path.split('/').any(|s| s == ".." || s == ".") {
            return Err(ToolError::invalid(
                "endpoint",
                "`.` and `..` segments are not allowed",
            ));
        }
        let mut url = self.base.clone();
        let joined = format!(
            "{}/{}",
            self.base.path().trim_end_matches('/'),
            path.trim_start_matches('/')
        );
        url.set_path(&joined);
        url.set_query(query);
        Ok(url)
    }

    fn path_url(&self, segments: &[&str], query: &[(&str, String)]) -> Result<Url, ToolError> {
        let mut url = self.base.clone();
        {
            let mut p = url
                .path_segments_mut()
                .map_err(|_| ToolError::failed("modules.fleet.mind_url cannot have paths"))?;
            p.pop_if_empty();
            for s in segments {
                p.push(s);
            }
        }
        if !query.is_empty() {
            let mut q = url.query_pairs_mut();
            for (k, v) in query {
                q.append_pair(k, v);
            }
        }
        Ok(url)
    }

    /// Sends a request and returns the parsed body (`null` for an empty one).
    pub async fn send(
        &self,
        method: reqwest::Method,
        url: Url,
        body: Option<&Value>,
    ) -> Result<Value, ToolError> {
        let what = format!("{method} {}", url.path());
        let mut req = self
            .client
            .request(method, url)
            .bearer_auth(self.token.expose());
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| ToolError::failed(format!("The Mind is unreachable ({what}): {e}")))?;
        read(resp, &what).await
    }

    /// `multipart/form-data` to `/files`: `title`, `folder`, then the file (Directus reads
    /// the fields before the file).
    pub async fn upload(
        &self,
        name: &str,
        bytes: Vec<u8>,
        title: &str,
        folder: Option<&str>,
    ) -> Result<Value, ToolError> {
        let url = self.path_url(&["files"], &[])?;
        let mut form = reqwest::multipart::Form::new().text("title", title.to_owned());
        if let Some(f) = folder {
            form = form.text("folder", f.to_owned());
        }
        let part = reqwest::multipart::Part::bytes(bytes)
            .file_name(name.to_owned())
            .mime_str(mime_for(name))
            .map_err(|e| ToolError::failed(format!("mime: {e}")))?;
        form = form.part("file", part);
        let resp = self
            .client
            .post(url)
            .bearer_auth(self.token.expose())
            .multipart(form)
            .send()
            .await
            .map_err(|e| {
                ToolError::failed(format!("The Mind is unreachable (POST /files): {e}"))
            })?;
        read(resp, "POST /files").await
    }
}

fn mime_for(name: &str) -> &'static str {
    let ext = name
        .rsplit_once('.')
        .map(|(_, e)| e.to_ascii_lowercase())
        .unwrap_or_default();
    match ext.as_str() {
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "csv" => "text/csv",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "zip" => "application/zip",
        _ => "application/octet-stream",
    }
}

/// Reads a Directus answer: the body for 2xx, a clear error otherwise.
async fn read(mut resp: reqwest::Response, what: &str) -> Result<Value, ToolError> {
    let status = resp.status();
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| ToolError::failed(format!("reading The Mind's answer to {what}: {e}")))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > MAX_RESPONSE {
            return Err(ToolError::failed(format!(
                "The Mind's answer to {what} is larger than {} MiB; ask for fewer fields or a smaller limit",
                MAX_RESPONSE >> 20
            )));
        }
    }
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    if status.is_success() {
        return Ok(match parsed {
            Some(v) => v,
            None if body.is_empty() => json!({"ok": true, "status": status.as_u16()}),
            None => Value::String(String::from_utf8_lossy(&body).into_owned()),
        });
    }
    let msg = parsed
        .as_ref()
        .and_then(|v| v["errors"][0]["message"].as_str().map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(&body).chars().take(300).collect());
    let code = status.as_u16();
    Err(ToolError::failed(match code {
        401 | 403 => format!(
            "The Mind refused {what} ({status}): {msg}. Check the token (`modules.fleet.mind_token`, vault key `mind-token`) and its role's permissions"
        ),
        404 => format!("The Mind has no {what} (404): {msg}"),
        500..=599 => format!("The Mind failed on {what} ({status}): {msg}; try again later"),
        _ => format!("The Mind rejected {what} ({status}): {msg}"),
    }))
}

fn method(m: &str) -> Result<reqwest::Method, ToolError> {
    match m.to_ascii_uppercase().as_str() {
        "GET" => Ok(reqwest::Method::GET),
        "POST" => Ok(reqwest::Method::POST),
        "PATCH" => Ok(reqwest::Method::PATCH),
        "DELETE" => Ok(reqwest::Method::DELETE),
        other => Err(ToolError::invalid(
            "method",
            format!("`{other}`: use GET, POST, PATCH or DELETE"),
        )),
    }
}

/// Calls any endpoint of The Mind (Directus REST) with the deployment's token and returns the
/// response body. Use the specific tools (`fleet_note`, `ai_models`) when they fit. Endpoints
/// are paths such as `/items/fleet_notes?limit=5`; full URLs to other hosts are refused.
#[tool(capabilities = [network, secrets], side_effects = external, hitl, timeout_secs = 60)]
async fn mind_api(
    ctx: &ToolContext,
    /// GET, POST, PATCH or DELETE.
    method: String,
    /// Path on The Mind, e.g. `/items/fleet_notes?filter[status][_eq]=sent`.
    endpoint: String,
    /// JSON body for POST and PATCH.
    data: Option<Value>,
) -> Result<Value, ToolError> {
    let m = self::method(&method)?;
    if data.is_some() && matches!(m, reqwest::Method::GET | reqwest::Method::DELETE) {
        return Err(ToolError::invalid(
            "data",
            "only POST and PATCH take a body",
        ));
    }
    let mind = Mind::from_ctx(ctx)?;
    let url = mind.url(&endpoint)?;
    mind.send(m, url, data.as_ref()).await
}

/// What to do with fleet notes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(crate = "strata_engine::schemars")]
pub enum NoteAction {
    /// A new note (subject and body required).
    Create,
    /// One note by `note_id`, or the latest notes for `target_user`.
    Read,
    /// Change fields of `note_id`.
    Update,
    /// Full-text search (`body` is the query) with optional filters.
    Search,
}

/// Note priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(crate = "strata_engine::schemars")]
pub enum Priority {
    /// Low.
    Low,
    /// Normal.
    Normal,
    /// High.
    High,
    /// Critical.
    Critical,
}

/// Note kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(crate = "strata_engine::schemars")]
pub enum NoteType {
    /// Memo.
    Memo,
    /// Announcement.
    Announcement,
    /// Incident.
    Incident,
    /// Repair request.
    RepairRequest,
    /// Feature request.
    FeatureRequest,
    /// Lesson learned.
    Lesson,
    /// Proposal.
    Proposal,
}

/// Note status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(crate = "strata_engine::schemars")]
pub enum NoteStatus {
    /// Draft.
    Draft,
    /// Sent.
    Sent,
    /// Read.
    Read,
    /// Acted on.
    Actioned,
    /// Resolved.
    Resolved,
    /// Archived.
    Archived,
}

fn put<T: Serialize>(m: &mut Map<String, Value>, k: &str, v: Option<T>) {
    if let Some(v) = v
        && let Ok(v) = serde_json::to_value(v)
    {
        m.insert(k.into(), v);
    }
}

fn need<T>(v: Option<T>, field: &str, action: &str) -> Result<T, ToolError> {
    v.ok_or_else(|| ToolError::invalid(field, format!("required for `{action}`")))
}

/// Notes between the agents and people of the fleet, kept in The Mind's `fleet_notes`:
/// `create` (subject, body; priority, note_type, status default normal/memo/sent),
/// `read` (note_id, or the latest for target_user), `update` (note_id and the fields to
/// change), `search` (body is the query; filters optional).
#[tool(capabilities = [network, secrets, messaging], side_effects = external, timeout_secs = 60)]
#[allow(clippy::too_many_arguments)]
async fn fleet_note(
    ctx: &ToolContext,
    /// create, read, update or search.
    action: NoteAction,
    /// Subject line.
    subject: Option<String>,
    /// The text (for search: the query).
    body: Option<String>,
    /// Who the note is for (person or agent id).
    target_user: Option<String>,
    /// Who it is from (default: the calling agent).
    from_user: Option<String>,
    /// low, normal, high or critical.
    priority: Option<Priority>,
    /// memo, announcement, incident, repair_request, feature_request, lesson or proposal.
    note_type: Option<NoteType>,
    /// draft, sent, read, actioned, resolved or archived.
    status: Option<NoteStatus>,
    /// The note's id (read, update).
    note_id: Option<String>,
    /// Tags.
    tags: Option<Vec<String>>,
) -> Result<Value, ToolError> {
    let mind = Mind::from_ctx(ctx)?;
    let a = match action {
        NoteAction::Create => "create",
        NoteAction::Read => "read",
        NoteAction::Update => "update",
        NoteAction::Search => "search",
    };
    match action {
        NoteAction::Create => {
            let subject = need(subject.filter(|s| !s.trim().is_empty()), "subject", a)?;
            let body = need(body.filter(|s| !s.trim().is_empty()), "body", a)?;
            let mut m = Map::new();
            m.insert("subject".into(), subject.into());
            m.insert("body".into(), body.into());
            put(&mut m, "target_user", target_user);
            let from = from_user.or_else(|| ctx.agent_id.clone());
            put(&mut m, "from_user", from);
            m.insert(
                "priority".into(),
                json!(priority.unwrap_or(Priority::Normal)),
            );
            m.insert(
                "note_type".into(),
                json!(note_type.unwrap_or(NoteType::Memo)),
            );
            m.insert("status".into(), json!(status.unwrap_or(NoteStatus::Sent)));
            put(&mut m, "tags", tags);
            let url = mind.path_url(&["items", "fleet_notes"], &[])?;
            let r = mind
                .send(reqwest::Method::POST, url, Some(&Value::Object(m)))
                .await?;
            Ok(r.get("data").cloned().unwrap_or(r))
        }
        NoteAction::Read => {
            if let Some(id) = note_id {
                let url = mind.path_url(&["items", "fleet_notes", &id], &[])?;
                let r = mind.send(reqwest::Method::GET, url, None).await?;
                return Ok(r.get("data").cloned().unwrap_or(r));
            }
            let target = need(target_user, "target_user", "read without note_id")?;
            let mut filter = json!({"target_user": {"_eq": target}});
            if let Some(s) = status {
                filter["status"] = json!({"_eq": s});
            }
            let url = mind.path_url(
                &["items", "fleet_notes"],
                &[
                    ("filter", filter.to_string()),
                    ("sort", "-date_created".into()),
                    ("limit", "20".into()),
                ],
            )?;
            let r = mind.send(reqwest::Method::GET, url, None).await?;
            Ok(r.get("data").cloned().unwrap_or(r))
        }
        NoteAction::Update => {
            let id = need(note_id, "note_id", a)?;
            let mut m = Map::new();
            put(&mut m, "subject", subject);
            put(&mut m, "body", body);
            put(&mut m, "target_user", target_user);
            put(&mut m, "from_user", from_user);
            put(&mut m, "priority", priority);
            put(&mut m, "note_type", note_type);
            put(&mut m, "status", status);
            put(&mut m, "tags", tags);
            if m.is_empty() {
                return Err(ToolError::invalid(
                    "note_id",
                    "nothing to update: pass the fields to change",
                ));
            }
            let url = mind.path_url(&["items", "fleet_notes", &id], &[])?;
            let r = mind
                .send(reqwest::Method::PATCH, url, Some(&Value::Object(m)))
                .await?;
            Ok(r.get("data").cloned().unwrap_or(r))
        }
        NoteAction::Search => {
            let mut filter = Map::new();
            let eq = |v: Value| json!({"_eq": v});
            if let Some(t) = target_user {
                filter.insert("target_user".into(), eq(t.into()));
            }
            if let Some(f) = from_user {
                filter.insert("from_user".into(), eq(f.into()));
            }
            if let Some(p) = priority {
                filter.insert("priority".into(), eq(json!(p)));
            }
            if let Some(t) = note_type {
                filter.insert("note_type".into(), eq(json!(t)));
            }
            if let Some(s) = status {
                filter.insert("status".into(), eq(json!(s)));
            }
            let mut q = vec![("sort", "-date_created".to_owned()), ("limit", "20".into())];
            if let Some(b) = body.filter(|b| !b.trim().is_empty()) {
                q.push(("search", b));
            }
            if !filter.is_empty() {
                q.push(("filter", Value::Object(filter).to_string()));
            }
            if q.len() == 2 {
                return Err(ToolError::invalid(
                    "body",
                    "give a query (body) or at least one filter",
                ));
            }
            let url = mind.path_url(&["items", "fleet_notes"], &q)?;
            let r = mind.send(reqwest::Method::GET, url, None).await?;
            Ok(r.get("data").cloned().unwrap_or(r))
        }
    }
}

/// What to do with the AI model catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(crate = "strata_engine::schemars")]
pub enum ModelsAction {
    /// Models, optionally of one `category`.
    List,
    /// One model by `model_id`.
    Get,
    /// Change fields (`data`) of `model_id`.
    Update,
    /// Change several models: `updates` is a list of objects each with its `id`.
    BatchUpdate,
    /// Categories with their model counts.
    Categories,
    /// Monthly budget and spend summed per provider.
    Budget,
    /// Full-text search (`query`).
    Search,
    /// Fetch the model's specification page (its `spec_url`) through the network guard.
    FetchSpec,
}

/// The fleet's AI model catalogue in The Mind's `ai_models` (fields used: `id`, `name`,
/// `provider`, `category`, `monthly_budget`, `monthly_spend`, `spec_url`): list, get,
/// update, batch_update, categories, budget (sums per provider), search, fetch_spec.
#[tool(capabilities = [network, secrets], side_effects = external, web_facing, timeout_secs = 60)]
#[allow(clippy::too_many_arguments)]
async fn ai_models(
    ctx: &ToolContext,
    /// list, get, update, batch_update, categories, budget, search or fetch_spec.
    action: ModelsAction,
    /// The model's id (get, update, fetch_spec).
    model_id: Option<String>,
    /// Fields to change (update).
    data: Option<Map<String, Value>>,
    /// Objects with an `id` and the fields to change (batch_update).
    updates: Option<Vec<Map<String, Value>>>,
    /// Search text (search).
    query: Option<String>,
    /// Only this category (list, search).
    category: Option<String>,
    /// At most this many (list, search; default 50, at most 500).
    limit: Option<u32>,
) -> Result<Value, ToolError> {
    let mind = Mind::from_ctx(ctx)?;
    let limit = limit.unwrap_or(50).clamp(1, 500).to_string();
    let cat_filter = |c: &Option<String>| {
        c.as_ref()
            .map(|c| ("filter", json!({"category": {"_eq": c}}).to_string()))
    };
    let data_of = |r: Value| r.get("data").cloned().unwrap_or(r);
    match action {
        ModelsAction::List => {
            let mut q = vec![("limit", limit), ("sort", "name".into())];
            q.extend(cat_filter(&category));
            let url = mind.path_url(&["items", "ai_models"], &q)?;
            Ok(data_of(mind.send(reqwest::Method::GET, url, None).await?))
        }
        ModelsAction::Search => {
            let text = need(query.filter(|q| !q.trim().is_empty()), "query", "search")?;
            let mut q = vec![("search", text), ("limit", limit)];
            q.extend(cat_filter(&category));
            let url = mind.path_url(&["items", "ai_models"], &q)?;
            Ok(data_of(mind.send(reqwest::Method::GET, url, None).await?))
        }
        ModelsAction::Get => {
            let id = need(model_id, "model_id", "get")?;
            let url = mind.path_url(&["items", "ai_models", &id], &[])?;
            Ok(data_of(mind.send(reqwest::Method::GET, url, None).await?))
        }
        ModelsAction::Update => {
            let id = need(model_id, "model_id", "update")?;
            let d = need(data.filter(|d| !d.is_empty()), "data", "update")?;
            let url = mind.path_url(&["items", "ai_models", &id], &[])?;
            Ok(data_of(
                mind.send(reqwest::Method::PATCH, url, Some(&Value::Object(d)))
                    .await?,
            ))
        }
        ModelsAction::BatchUpdate => {
            let u = need(updates.filter(|u| !u.is_empty()), "updates", "batch_update")?;
            if let Some(i) = u
                .iter()
                .position(|o| o.get("id").is_none_or(Value::is_null))
            {
                return Err(ToolError::invalid(
                    "updates",
                    format!("item {i} has no `id`"),
                ));
            }
            let url = mind.path_url(&["items", "ai_models"], &[])?;
            let body = Value::Array(u.into_iter().map(Value::Object).collect());
            Ok(data_of(
                mind.send(reqwest::Method::PATCH, url, Some(&body)).await?,
            ))
        }
        ModelsAction::Categories => {
            let url = mind.path_url(
                &["items", "ai_models"],
                &[
                    ("groupBy[]", "category".into()),
                    ("aggregate[count]", "*".into()),
                ],
            )?;
            Ok(data_of(mind.send(reqwest::Method::GET, url, None).await?))
        }
        ModelsAction::Budget => {
            let url = mind.path_url(
                &["items", "ai_models"],
                &[
                    ("groupBy[]", "provider".into()),
                    ("aggregate[sum]", "monthly_budget,monthly_spend".into()),
                ],
            )?;
            Ok(data_of(mind.send(reqwest::Method::GET, url, None).await?))
        }
        ModelsAction::FetchSpec => {
            let id = need(model_id, "model_id", "fetch_spec")?;
            let url = mind.path_url(
                &["items", "ai_models", &id],
                &[("fields", "id,name,spec_url".into())],
            )?;
            let model = data_of(mind.send(reqwest::Method::GET, url, None).await?);
            let spec_url = model["spec_url"]
                .as_str()
                .filter(|s| !s.is_empty())
                .ok_or_else(|| {
                    ToolError::failed(format!("model `{id}` has no spec_url in The Mind"))
                })?;
            let n = &ctx.env.config.security.network;
            let policy = strata_net::NetPolicy {
                allow: n.allow.clone(),
                max_redirects: n.max_redirects,
                max_response_bytes: n.max_response_bytes,
                timeout_secs: n.timeout_secs,
            };
            let guard =
                strata_net::NetGuard::new(&policy).map_err(|e| ToolError::failed(e.to_string()))?;
            let r = guard
                .fetch(strata_net::FetchRequest {
                    method: reqwest::Method::GET,
                    url: spec_url.to_owned(),
                    headers: Vec::new(),
                    body: None,
                    sensitive_headers: Vec::new(),
                })
                .await
                .map_err(|e| ToolError::failed(format!("fetching {spec_url}: {e}")))?;
            if !(200..300).contains(&r.status) {
                return Err(ToolError::failed(format!(
                    "{spec_url} answered {}",
                    r.status
                )));
            }
            let text: String = String::from_utf8_lossy(&r.body)
                .chars()
                .take(50_000)
                .collect();
            Ok(
                json!({"model": model, "spec_url": spec_url, "content": text, "truncated": r.truncated || r.body.len() > text.len()}),
            )
        }
    }
}

/// Uploads a local file (inside the allowed roots) to The Mind's file library and returns
/// the new file's id.
#[tool(capabilities = [read, network, secrets], side_effects = external, timeout_secs = 120)]
async fn upload_file_to_cms(
    ctx: &ToolContext,
    /// Path relative to the overlay, inside `tools.roots`.
    file_path: String,
    /// Title in the library (default: the file name).
    title: Option<String>,
    /// Folder id in the library.
    folder: Option<String>,
) -> Result<Value, ToolError> {
    let cfg = crate::config(ctx)?;
    // Opened beneath its root: a symlink swapped in after the check is never followed.
    let (file, path) = ctx
        .open_path(&file_path)
        .map_err(|e| ToolError::invalid("file_path", e.to_string()))?;
    let mut file = tokio::fs::File::from_std(file);
    let meta = file
        .metadata()
        .await
        .map_err(|e| ToolError::invalid("file_path", format!("{file_path}: {e}")))?;
    if !meta.is_file() {
        return Err(ToolError::invalid(
            "file_path",
            format!("{file_path} is not a file"),
        ));
    }
    let cap = cfg.max_upload_mb.max(1) << 20;
    if meta.len() > cap {
        return Err(ToolError::invalid(
            "file_path",
            format!(
                "{file_path} is {} bytes; the limit is {} MiB (`modules.fleet.max_upload_mb`)",
                meta.len(),
                cfg.max_upload_mb
            ),
        ));
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("upload")
        .to_owned();
    let mind = Mind::from_ctx(ctx)?;
    let mut bytes = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut file, &mut bytes)
        .await
        .map_err(|e| ToolError::failed(format!("reading {file_path}: {e}")))?;
    let title = title
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| name.clone());
    let r = mind
        .upload(
            &name,
            bytes,
            &title,
            folder.as_deref().filter(|f| !f.is_empty()),
        )
        .await?;
    let data = r.get("data").cloned().unwrap_or(r);
    let id = data["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| ToolError::failed("The Mind answered without a file id"))?;
    Ok(json!({"id": id, "title": title, "filename": name, "bytes": meta.len()}))
}
