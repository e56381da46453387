//! A fake Discord for the connector's tests: a real WebSocket gateway and REST server on
//! 127.0.0.1 speaking Discord's JSON (no zstd), and builders for the dispatches a test pushes
//! (`message`, `reaction`, `interaction`).

use std::sync::{Arc, Mutex};

use axum::extract::ws::{Message as Ws, WebSocket, WebSocketUpgrade};
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// A fake Discord on 127.0.0.1: the gateway (WebSocket at `/`: HELLO, IDENTIFY → READY,
/// heartbeats, RESUME, dispatches pushed by the test) and REST (`/api/v10/…`, every request
/// recorded, answered as Discord would for what the connector uses).
#[derive(Clone)]
pub struct Fake {
    /// REST requests: (method, path, body).
    pub rest: Arc<Mutex<Vec<(String, String, Value)>>>,
    /// IDENTIFY payloads received.
    pub identified: Arc<Mutex<Vec<Value>>>,
    /// Dispatches to push to connected gateways.
    pub push: broadcast::Sender<Value>,
    /// Drops every gateway connection (code 4000: the client may resume).
    pub drop_all: broadcast::Sender<()>,
    /// Asks every connected client to reconnect (op 7 RECONNECT).
    pub reconnect: broadcast::Sender<()>,
    /// RESUME payloads received.
    pub resumed: Arc<Mutex<Vec<Value>>>,
    /// The last dispatch pushed (replayed after a resume, as Discord may).
    pub last: Arc<Mutex<Option<Value>>>,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Gateway connections open now.
    pub connected: Arc<std::sync::atomic::AtomicUsize>,
    /// The most gateway connections that were open at once.
    pub most_connected: Arc<std::sync::atomic::AtomicUsize>,
    /// Every message in every channel, as Discord keeps them: those sent with [`Fake::send`]
    /// and those posted through REST (`GET …/messages` and `…/messages/{id}` read them).
    pub history: Arc<Mutex<Vec<Value>>>,
}

impl Fake {
    /// Sends a dispatch as Discord does: a message is kept in its channel's history whether
    /// or not a gateway is connected to hear it, then pushed to those that are.
    pub fn send(&self, dispatch: Value) {
        if dispatch["t"] == "MESSAGE_CREATE" {
            self.history
                .lock()
                .expect("lock")
                .push(dispatch["d"].clone());
        }
        let _ = self.push.send(dispatch);
    }

    /// Messages posted through REST in `channel`, oldest first: their text.
    pub fn posted_in(&self, channel: &str) -> Vec<String> {
        self.history
            .lock()
            .expect("lock")
            .iter()
            .filter(|m| m["channel_id"] == channel && m["author"]["id"] == "900")
            .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

impl Fake {
    /// The texts of the edits made to messages in `channel`, in order.
    pub fn edits_in(&self, channel: &str) -> Vec<String> {
        self.rest
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, p, _)| {
                m == "PATCH" && p.starts_with(&format!("/api/v10/channels/{channel}/messages/"))
            })
            .map(|(_, _, v)| v["content"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

/// Counts a gateway connection while it is open.
struct Open(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

async fn gateway(ws: WebSocketUpgrade, State(f): State<Fake>) -> Response {
    ws.on_upgrade(move |socket| session(socket, f))
}

async fn session(mut socket: WebSocket, f: Fake) {
    let now = f
        .connected
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        + 1;
    f.most_connected
        .fetch_max(now, std::sync::atomic::Ordering::SeqCst);
    let _open = Open(f.connected.clone());
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 41250}});
    if socket
        .send(Ws::Text(hello.to_string().into()))
        .await
        .is_err()
    {
        return;
    }
    let mut rx = f.push.subscribe();
    let mut drops = f.drop_all.subscribe();
    let mut reconnects = f.reconnect.subscribe();
    let mut seq = 1u64;
    loop {
        tokio::select! {
            m = socket.recv() => {
                let Some(Ok(m)) = m else { return };
                let Ws::Text(t) = m else { continue };
                let v: Value = serde_json::from_str(&t).unwrap_or(Value::Null);
                match v["op"].as_u64() {
                    Some(1) => {
                        let _ = socket.send(Ws::Text(json!({"op": 11}).to_string().into())).await;
                    }
                    Some(6) => {
                        f.resumed.lock().expect("lock").push(v["d"].clone());
                        let resumed = json!({"op": 0, "t": "RESUMED", "s": seq, "d": null});
                        seq += 1;
                        let _ = socket.send(Ws::Text(resumed.to_string().into())).await;
                        let replay = f.last.lock().expect("lock").clone();
                        if let Some(mut d) = replay {
                            d["s"] = json!(seq);
                            seq += 1;
                            let _ = socket.send(Ws::Text(d.to_string().into())).await;
                        }
                    }
                    Some(2) => {
                        f.identified.lock().expect("lock").push(v["d"].clone());
                        if v["d"]["token"].as_str().is_some_and(|t| t.contains("bad")) {
                            let frame = axum::extract::ws::CloseFrame {
                                code: 4004,
                                reason: "Authentication failed.".into(),
                            };
                            let _ = socket.send(Ws::Close(Some(frame))).await;
                            return;
                        }
                        let ready = json!({"op": 0, "t": "READY", "s": seq, "d": {
                            "v": 10,
                            "user": {"id": "900", "username": "strata-bot", "discriminator": "0",
                                     "avatar": null, "bot": true, "mfa_enabled": false},
                            "guilds": [{"id": "9", "unavailable": true}],
                            "session_id": "fake-session",
                            "resume_gateway_url": format!("ws://127.0.0.1:{}", f.port),
                            "application": {"id": "900", "flags": 0},
                            "shard": [0, 1]
                        }});
                        seq += 1;
                        let _ = socket.send(Ws::Text(ready.to_string().into())).await;
                    }
                    _ => {}
                }
            }
            _ = reconnects.recv() => {
                let _ = socket.send(Ws::Text(json!({"op": 7, "d": null}).to_string().into())).await;
            }
            _ = drops.recv() => {
                let frame = axum::extract::ws::CloseFrame { code: 4000, reason: "unknown error".into() };
                let _ = socket.send(Ws::Close(Some(frame))).await;
                return;
            }
            d = rx.recv() => {
                let Ok(mut d) = d else { return };
                *f.last.lock().expect("lock") = Some(d.clone());
                d["s"] = json!(seq);
                seq += 1;
                if socket.send(Ws::Text(d.to_string().into())).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn rest(State(f): State<Fake>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let ctype = parts
        .headers
        .get("content-type")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let mut v: Value = if ctype.starts_with("multipart/form-data") {
        // Files: the JSON part is `payload_json`; record the file names and bodies.
        let raw = String::from_utf8_lossy(&bytes).into_owned();
        let mut v = raw
            .split("name=\"payload_json\"")
            .nth(1)
            .and_then(|rest| rest.split("\r\n\r\n").nth(1))
            .and_then(|body| body.split("\r\n--").next())
            .and_then(|j| serde_json::from_str::<Value>(j).ok())
            .unwrap_or(Value::Null);
        let files: Vec<Value> = raw
            .split("filename=\"")
            .skip(1)
            .filter_map(|r| {
                let name = r.split('"').next()?;
                let body = r.split("\r\n\r\n").nth(1)?.split("\r\n--").next()?;
                Some(json!({"name": name, "body": body}))
            })
            .collect();
        v["_files"] = json!(files);
        v
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    if let Some(o) = v.as_object_mut() {
        let auth = parts
            .headers
            .get("authorization")
            .and_then(|h| h.to_str().ok());
        o.insert("_auth".into(), json!(auth));
    }
    let path = parts.uri.path().to_owned();
    f.rest
        .lock()
        .expect("lock")
        .push((parts.method.to_string(), path.clone(), v.clone()));
    // The "CDN": attachment bodies.
    if path.starts_with("/cdn/") {
        return format!("contents of {}", path.trim_start_matches("/cdn/")).into_response();
    }
    // GET /channels/{id}: a text channel whose category is 777000 for channel 300, 888000
    // otherwise.
    if parts.method == axum::http::Method::GET && path.split('/').count() == 5 {
        let id = path.rsplit('/').next().unwrap_or("1").to_owned();
        let parent = if id == "300" { "777000" } else { "888000" };
        return axum::Json(json!({
            "id": id, "type": 0, "guild_id": "9", "name": "general", "position": 0,
            "parent_id": parent, "permission_overwrites": []
        }))
        .into_response();
    }
    let segments: Vec<&str> = path.split('/').collect();
    // POST /guilds/{guild}/channels: a new channel with a fresh id, as asked.
    if parts.method == axum::http::Method::POST
        && segments.get(3) == Some(&"guilds")
        && segments.get(5) == Some(&"channels")
    {
        static NEXT_CHANNEL: std::sync::atomic::AtomicU64 =
            std::sync::atomic::AtomicU64::new(61000);
        let id = NEXT_CHANNEL.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        return axum::Json(json!({
            "id": id.to_string(), "type": 0, "guild_id": segments[4], "name": v["name"],
            "topic": v["topic"], "position": 0, "parent_id": v["parent_id"],
            "permission_overwrites": []
        }))
        .into_response();
    }
    let channel = segments.get(4).copied().unwrap_or("1").to_owned();
    // GET /channels/{id}/messages?after=&before=&limit=: the channel's messages between ids,
    // newest first; GET /channels/{id}/messages/{id}: one.
    if parts.method == axum::http::Method::GET && segments.get(5) == Some(&"messages") {
        let id_of = |m: &Value| {
            m["id"]
                .as_str()
                .and_then(|i| i.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let history = f.history.lock().expect("lock").clone();
        let in_channel = history.into_iter().filter(|m| m["channel_id"] == channel);
        if let Some(one) = segments.get(6) {
            return match in_channel.into_iter().find(|m| m["id"] == *one) {
                Some(m) => axum::Json(m).into_response(),
                None => (
                    axum::http::StatusCode::NOT_FOUND,
                    axum::Json(json!({"message": "Unknown Message", "code": 10008})),
                )
                    .into_response(),
            };
        }
        let query = |k: &str| {
            parts.uri.query().unwrap_or("").split('&').find_map(|kv| {
                kv.strip_prefix(k)
                    .and_then(|v| v.strip_prefix('='))
                    .and_then(|v| v.parse::<u64>().ok())
            })
        };
        let after = query("after").unwrap_or(0);
        let before = query("before").unwrap_or(u64::MAX);
        let limit = query("limit").unwrap_or(50) as usize;
        let mut found: Vec<Value> = in_channel
            .filter(|m| id_of(m) > after && id_of(m) < before)
            .collect();
        found.sort_by_key(|m| std::cmp::Reverse(id_of(m)));
        found.truncate(limit);
        return axum::Json(found).into_response();
    }
    // PATCH /channels/{c}/messages/{id} edits a kept message; DELETE removes it.
    if segments.get(5) == Some(&"messages")
        && let Some(one) = segments.get(6).map(|s| (*s).to_owned())
    {
        let mut history = f.history.lock().expect("lock");
        let at = history
            .iter()
            .position(|m| m["channel_id"] == channel && m["id"] == one.as_str());
        if parts.method == axum::http::Method::PATCH
            && let Some(i) = at
        {
            if let Some(c) = v.get("content") {
                history[i]["content"] = c.clone();
            }
            history[i]["edited_timestamp"] = json!("2026-12-02T00:00:01+00:00");
            return axum::Json(history[i].clone()).into_response();
        }
        if parts.method == axum::http::Method::DELETE && segments.len() == 7 {
            if let Some(i) = at {
                history.remove(i);
            }
            return axum::http::StatusCode::NO_CONTENT.into_response();
        }
    }
    // A post with `enforce_nonce` whose nonce this bot used in the channel gets the message it
    // made then, and makes none (Discord keeps nonces a few minutes; the fake, for its life).
    let is_post = parts.method == axum::http::Method::POST
        && segments.len() == 6
        && segments[5] == "messages";
    if is_post && v["enforce_nonce"] == true && !v["nonce"].is_null() {
        let seen = f
            .history
            .lock()
            .expect("lock")
            .iter()
            .find(|m| m["channel_id"] == channel && m["nonce"] == v["nonce"])
            .cloned();
        if let Some(m) = seen {
            return axum::Json(m).into_response();
        }
    }
    // Echo a message object for POST .../messages, with a fresh id.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(5000);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let posted = json!({
        "id": id.to_string(), "channel_id": channel, "content": v["content"], "type": 0,
        "author": {"id": "900", "username": "strata-bot", "discriminator": "0", "avatar": null, "bot": true},
        "attachments": [], "embeds": [], "mentions": [], "mention_roles": [],
        "mention_everyone": false, "pinned": false, "tts": false,
        "timestamp": "2026-12-02T00:00:00+00:00", "edited_timestamp": null,
        "nonce": v["nonce"]
    });
    if is_post {
        f.history.lock().expect("lock").push(posted.clone());
    }
    axum::Json(posted).into_response()
}

/// Starts a fake Discord (gateway at `/`, REST everywhere else) on 127.0.0.1.
pub async fn fake() -> Fake {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = l.local_addr().expect("addr").port();
    let (push, _) = broadcast::channel(64);
    let (drop_all, _) = broadcast::channel(4);
    let (reconnect, _) = broadcast::channel(4);
    let f = Fake {
        rest: Arc::default(),
        identified: Arc::default(),
        push,
        drop_all,
        reconnect,
        resumed: Arc::default(),
        last: Arc::default(),
        port,
        connected: Arc::default(),
        most_connected: Arc::default(),
        history: Arc::default(),
    };
    let app = axum::Router::new()
        .route("/", axum::routing::get(gateway))
        .fallback(rest)
        .with_state(f.clone());
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    f
}

pub fn message(
    id: u64,
    channel: &str,
    guild: Option<&str>,
    author: &str,
    bot: bool,
    text: &str,
    mention_me: bool,
) -> Value {
    let mut d = json!({
        "id": id.to_string(), "channel_id": channel, "content": text, "type": 0,
        "author": {"id": author, "username": format!("user-{author}"), "discriminator": "0", "avatar": null, "bot": bot},
        "attachments": [], "embeds": [], "mention_roles": [],
        "mention_everyone": false, "pinned": false, "tts": false,
        "timestamp": "2026-12-02T00:00:00+00:00", "edited_timestamp": null,
        "mentions": if mention_me {
            json!([{"id": "900", "username": "strata-bot", "discriminator": "0", "avatar": null, "bot": true, "public_flags": 0}])
        } else { json!([]) }
    });
    if let Some(g) = guild {
        d["guild_id"] = json!(g);
    }
    json!({"op": 0, "t": "MESSAGE_CREATE", "d": d})
}

pub fn reaction(message: &str, user: &str, bot: bool, emoji: &str) -> Value {
    json!({"op": 0, "t": "MESSAGE_REACTION_ADD", "d": {
        "user_id": user, "channel_id": "555", "message_id": message, "guild_id": "9",
        "emoji": {"id": null, "name": emoji}, "burst": false, "type": 0,
        "member": {"user": {"id": user, "username": format!("u{user}"), "discriminator": "0", "avatar": null, "bot": bot},
                   "roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": false, "mute": false, "flags": 0}
    }})
}

pub fn interaction(id: u64, channel: &str, user: &str, name: &str, options: Value) -> Value {
    json!({"op": 0, "t": "INTERACTION_CREATE", "d": {
        "id": id.to_string(), "application_id": "900", "type": 2, "token": format!("tok-{id}"),
        "version": 1, "attachment_size_limit": 8388608, "authorizing_integration_owners": {},
        "entitlements": [], "guild_id": "9", "channel_id": channel,
        "channel": {"id": channel, "type": 0},
        "member": {"user": {"id": user, "username": format!("u{user}"), "discriminator": "0", "avatar": null},
                   "roles": [], "joined_at": "2026-01-01T00:00:00+00:00", "deaf": false, "mute": false,
                   "flags": 0, "permissions": "0"},
        "data": {"id": "1", "name": name, "type": 1, "options": options}
    }})
}
