//! Skills as slash commands, /reset and /status, re-registration.

use std::time::Duration;

use serde_json::{Value, json};
use strata_test_support::scripted::text;

use crate::world::*;
use strata_test_support::discord::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_are_slash_commands_and_reset_and_status_work() {
    let w = world_with(
        vec![(
            "ops",
            routing(Some(&["100"])),
            vec![
                text("Here is a short briefing on backups."),
                text("remembered?"),
            ],
        )],
        |c| {
            // The example's disk-usage says `gated: false`; the operator gates it here.
            c.security.hitl.gated_tools.push("skill__*".into());
            c.security.rate_limits.tools.insert(
                "skill__*".into(),
                strata_engine::config::Limits {
                    per_minute: Some(1),
                    ..Default::default()
                },
            );
        },
        None,
    )
    .await;
    // Registered per guild: the two built-ins and both skills, options with choices.
    let mut registered = None;
    for _ in 0..100 {
        registered = w
            .fake
            .rest
            .lock()
            .expect("lock")
            .iter()
            .find(|(m, p, _)| m == "PUT" && p == "/api/v10/applications/900/guilds/9/commands")
            .map(|(_, _, v)| v.clone());
        if registered.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let registered = registered.expect("commands registered");
    let names: Vec<&str> = registered
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names, ["reset", "status", "brief", "disk-usage"]);
    let brief = &registered[2];
    assert_eq!(brief["options"][0]["name"], "topic");
    assert_eq!(brief["options"][0]["required"], true);
    assert_eq!(brief["options"][1]["choices"][1]["value"], "long");

    let answers = |w: &World| -> Vec<(String, String)> {
        w.fake
            .rest
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, p, _)| m == "PATCH" && p.ends_with("/messages/@original"))
            .map(|(_, p, v)| {
                (
                    p.split('/').nth(5).unwrap_or_default().to_owned(),
                    v["content"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };

    let push = |i: Value| w.fake.push.send(i).expect("push");
    push(interaction(11, "100", "42", "status", json!([])));
    push(interaction(
        12,
        "100",
        "42",
        "brief",
        json!([{"name": "topic", "type": 3, "value": "backups"}]),
    ));
    push(interaction(
        13,
        "100",
        "42",
        "disk-usage",
        json!([{"name": "path", "type": 3, "value": "knowledgebase"}]),
    ));
    // The command skill is its tool, gated: the request waits in the approval channel
    // until an approver's ✅.
    let msg_id = w.reacted_message(0).await;
    let request = w
        .posted()
        .into_iter()
        .find(|(c, _, _)| c == "555")
        .map(|(_, t, _)| t)
        .unwrap_or_default();
    assert!(request.contains("`skill__disk-usage`"), "{request}");
    assert!(
        !answers(&w).iter().any(|(t, _)| t == "tok-13"),
        "nothing ran before the approval"
    );
    push(reaction(&msg_id, "42", false, "✅"));
    let mut got = Vec::new();
    for _ in 0..500 {
        got = answers(&w);
        if got.len() >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    got.sort();
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(
        got[0],
        (
            "tok-11".into(),
            "Answering here through discord:main: ops.".into()
        )
    );
    assert_eq!(
        got[1],
        (
            "tok-12".into(),
            "Here is a short briefing on backups.".into()
        )
    );
    // The command skill really ran (in the sandbox, from the overlay directory).
    assert!(
        got[2].1.starts_with("```") && got[2].1.contains("\tknowledgebase"),
        "{got:?}"
    );
    // Each interaction was acknowledged first (deferred).
    let acks = w
        .fake
        .rest
        .lock()
        .expect("lock")
        .iter()
        .filter(|(m, p, v)| m == "POST" && p.ends_with("/callback") && v["type"] == 5)
        .count();
    assert_eq!(acks, 3);
    // The prompt skill ran as a turn in the channel's session with the rendered prompt.
    let asked = w.providers["ops"].requests()[0]
        .messages
        .last()
        .map(|m| m.content.clone())
        .unwrap_or_default();
    assert!(
        asked.starts_with("Give me a short briefing on backups"),
        "{asked}"
    );

    // /reset forgets the channel's conversation: the next turn starts without history.
    push(interaction(14, "100", "42", "reset", json!([])));
    eventually(|| answers(&w).len() >= 4).await;
    let got = answers(&w);
    assert!(
        got.iter()
            .any(|(t, c)| t == "tok-14" && c.contains("Fresh start: ops")),
        "{got:?}"
    );
    // A stranger's /reset resets nothing.
    push(interaction(15, "100", "555", "reset", json!([])));
    eventually(|| answers(&w).len() >= 5).await;
    assert!(
        answers(&w)
            .iter()
            .any(|(t, c)| t == "tok-15" && c == "Nothing was reset.")
    );
    // A staff member may not run a command skill.
    push(interaction(
        16,
        "100",
        "43",
        "disk-usage",
        json!([{"name": "path", "type": 3, "value": "tmp"}]),
    ));
    eventually(|| answers(&w).len() >= 6).await;
    // Access control decides it, in the Invoker: staff may use only the safe tools.
    assert!(
        answers(&w)
            .iter()
            .any(|(t, c)| t == "tok-16" && c.contains("denied: denied (layer 2)")),
        "{:?}",
        answers(&w)
    );
    // The owner again within the minute: the skill's rate limit refuses before anyone is asked.
    push(interaction(
        17,
        "100",
        "42",
        "disk-usage",
        json!([{"name": "path", "type": 3, "value": "knowledgebase"}]),
    ));
    eventually(|| answers(&w).iter().any(|(t, _)| t == "tok-17")).await;
    assert!(
        answers(&w)
            .iter()
            .any(|(t, c)| t == "tok-17" && c.contains("rate_limited")),
        "{:?}",
        answers(&w)
    );
    // Each of the three calls left its audit record, with the sender as principal.
    let audit = w.dir_path.join("data/audit.jsonl");
    let records = || -> Vec<(String, String)> {
        std::fs::read_to_string(&audit)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["tool"] == "skill__disk-usage" && v.get("event").is_none())
            .map(|v| {
                (
                    v["principal"].as_str().unwrap_or_default().to_owned(),
                    v["status"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    eventually(|| records().len() >= 3).await;
    assert_eq!(
        records(),
        [
            ("person:discord:42".into(), "ok".into()),
            ("person:discord:43".into(), "denied".into()),
            ("person:discord:42".into(), "rate_limited".into()),
        ]
    );
    w.fake
        .push
        .send(message(
            1501,
            "100",
            Some("9"),
            "42",
            false,
            "do you remember?",
            false,
        ))
        .expect("push");
    eventually(|| w.providers["ops"].requests().len() >= 2).await;
    let req = &w.providers["ops"].requests()[1];
    assert_eq!(
        req.messages.len(),
        1,
        "no history after /reset: {:?}",
        req.messages
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slash_commands_are_registered_again_when_the_skills_change() {
    let w = world_with(
        vec![("ops", routing(Some(&[])), vec![])],
        |c| c.connectors.discord.commands_resync_seconds = 1,
        None,
    )
    .await;
    let registrations = |w: &World| -> Vec<Vec<String>> {
        w.fake
            .rest
            .lock()
            .expect("lock")
            .iter()
            .filter(|(m, p, _)| m == "PUT" && p.ends_with("/guilds/9/commands"))
            .map(|(_, _, v)| {
                v.as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|c| c["name"].as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .collect()
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        registrations(&w).len(),
        1,
        "nothing changed: registered once"
    );
    std::fs::write(
        w.dir_path.join("skills/standup.yaml"),
        "name: standup\ndescription: Writes the stand-up note.\nprompt: Write today's stand-up note.\n",
    )
    .expect("skill");
    w.skills.reload();
    eventually(|| registrations(&w).len() >= 2).await;
    let regs = registrations(&w);
    assert_eq!(regs.len(), 2, "{regs:?}");
    assert!(regs[1].contains(&"standup".to_owned()), "{regs:?}");
}
