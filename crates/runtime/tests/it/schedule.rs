//! Schedules: when they are due (cron in a zone through both DST changes, month ends,
//! aliases, `every`, one-off times), config problems named by key, and the scheduler with
//! the time given to it — catch-up after a restart, no overlap, a timeout, failures with
//! backoff and an alert, one run per due time between two instances, a dead instance's run
//! taken again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use strata_engine::config::{CatchUp, Config, ScheduleConfig};
use strata_runtime::schedule::{self, Action, Schedule, ScheduleStore, When};
use strata_runtime::schedule::{InMemorySchedules, RunSchedule, Scheduler};

fn ts(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

/// Local dates (in `tz`) of every occurrence from `from` to `to`.
fn occurrences(w: &When, tz: &str, from: &str, to: &str) -> Vec<String> {
    let tz = schedule::zone(tz).expect("zone");
    let (mut t, end) = (ts(from), ts(to));
    let mut out = Vec::new();
    while let Some(n) = w.next_after(t) {
        if n > end {
            break;
        }
        out.push(n.to_zoned(tz.clone()).strftime("%F %T %Z").to_string());
        t = n;
    }
    out
}

#[test]
fn a_daily_0230_job_runs_once_on_both_dst_change_days() {
    let tz = schedule::zone("Europe/Stockholm").expect("zone");
    let w = When::cron("30 2 * * *", tz).expect("cron");
    // Spring forward, 29 March 2026: 02:00 → 03:00, so 02:30 never happens that night.
    let spring = occurrences(
        &w,
        "Europe/Stockholm",
        "2026-03-27T12:00:00Z",
        "2026-03-31T12:00:00Z",
    );
    let on = |day: &str, v: &[String]| v.iter().filter(|o| o.starts_with(day)).count();
    assert_eq!(on("2026-03-29", &spring), 1, "{spring:?}");
    assert_eq!(spring.len(), 4, "{spring:?}");
    // Fall back, 25 October 2026: 03:00 → 02:00, so 02:30 happens twice that night.
    let fall = occurrences(
        &w,
        "Europe/Stockholm",
        "2026-10-23T12:00:00Z",
        "2026-10-27T12:00:00Z",
    );
    assert_eq!(on("2026-10-25", &fall), 1, "{fall:?}");
    assert_eq!(fall.len(), 4, "{fall:?}");
}

#[test]
fn cron_month_ends_aliases_seconds_and_every() {
    let utc = || schedule::zone("UTC").expect("utc");
    // The 31st: months without one are passed over.
    let w = When::cron("0 0 31 * *", utc()).expect("cron");
    assert_eq!(
        occurrences(&w, "UTC", "2026-01-01T00:00:00Z", "2026-06-01T00:00:00Z"),
        [
            "2026-01-31 00:00:00 UTC",
            "2026-03-31 00:00:00 UTC",
            "2026-05-31 00:00:00 UTC"
        ]
    );
    // Weekdays at 9 in Stockholm (winter: UTC+1).
    let w = When::cron(
        "0 9 * * MON-FRI",
        schedule::zone("Europe/Stockholm").expect("z"),
    )
    .expect("cron");
    assert_eq!(
        w.next_after(ts("2026-12-04T09:00:00Z")),
        Some(ts("2026-12-07T08:00:00Z")),
        "Friday 10:00 local → Monday 09:00 local"
    );
    let daily = When::cron("@daily", utc()).expect("alias");
    assert_eq!(
        daily.next_after(ts("2026-12-03T10:00:00Z")),
        Some(ts("2026-12-04T00:00:00Z"))
    );
    let six = When::cron("*/20 * * * * *", utc()).expect("six fields");
    assert_eq!(
        six.next_after(ts("2026-12-03T10:00:05Z")),
        Some(ts("2026-12-03T10:00:20Z"))
    );
    let every = When::every("15m").expect("every");
    assert_eq!(
        every.next_after(ts("2026-12-03T10:00:00Z")),
        Some(ts("2026-12-03T10:15:00Z"))
    );
    // What people write to an agent.
    let now = ts("2026-12-03T10:00:00Z");
    let z = schedule::zone("Europe/Stockholm").expect("z");
    for (text, want) in [
        ("in 2h", Some(ts("2026-12-03T12:00:00Z"))),
        ("2026-12-07T09:00", Some(ts("2026-12-07T08:00:00Z"))),
        ("2026-12-07T09:00:00Z", Some(ts("2026-12-07T09:00:00Z"))),
        ("every 30m", Some(ts("2026-12-03T10:30:00Z"))),
    ] {
        let w = When::parse(text, &z, now).expect(text);
        assert_eq!(w.next_after(now), want, "{text}");
    }
    // A time between seconds is due at the next whole one (the state counts in seconds; a
    // run would otherwise be due again at its own second).
    let half = When::parse("2026-12-03T10:00:00.5Z", &z, now).expect("instant");
    assert_eq!(half.next_after(now), Some(ts("2026-12-03T10:00:01Z")));
    assert_eq!(half.next_after(ts("2026-12-03T10:00:01Z")), None);
    // A one-off time is due once.
    let once = When::parse("in 1h", &z, now).expect("once");
    assert_eq!(once.next_after(ts("2026-12-03T11:00:00Z")), None);
    for bad in ["61 * * * *", "tomorrow-ish", "every 0s", "in soon"] {
        assert!(When::parse(bad, &z, now).is_err(), "{bad}");
    }
}

#[test]
fn config_problems_name_their_keys() {
    let mut c = Config::default();
    c.agents.insert("main".into(), Default::default());
    let mut add = |name: &str, f: &dyn Fn(&mut ScheduleConfig)| {
        let mut s = ScheduleConfig::default();
        f(&mut s);
        c.schedules.insert(name.into(), s);
    };
    add("bad-cron", &|s| {
        s.cron = Some("0 25 * * *".into());
        s.prompt = Some("hi".into());
    });
    add("bad-zone", &|s| {
        s.cron = Some("0 9 * * *".into());
        s.timezone = Some("Mars/Olympus".into());
        s.prompt = Some("hi".into());
    });
    add("no-agent", &|s| {
        s.every = Some("1h".into());
        s.prompt = Some("hi".into());
        s.agent = Some("ghost".into());
    });
    add("no-job", &|s| {
        s.every = Some("1h".into());
        s.job = Some("defrag".into());
    });
    add("both", &|s| {
        s.every = Some("1h".into());
        s.cron = Some("0 9 * * *".into());
        s.job = Some("memory_decay".into());
    });
    add("bad-channel", &|s| {
        s.every = Some("1h".into());
        s.prompt = Some("hi".into());
        s.deliver_to = Some("nowhere".into());
    });
    add("bad-timeout", &|s| {
        s.every = Some("1h".into());
        s.prompt = Some("hi".into());
        s.timeout = Some("soon".into());
    });
    let problems = schedule::from_config(&c).expect_err("refused").join("\n");
    for key in [
        "`schedules.bad-cron.cron`",
        "`schedules.bad-zone.timezone`",
        "`schedules.no-agent.agent`",
        "`schedules.no-job.job`",
        "`schedules.both.cron`",
        "`schedules.bad-channel.deliver_to`",
        "`schedules.bad-timeout.timeout`",
    ] {
        assert!(problems.contains(key), "{key} missing from:\n{problems}");
    }
    // The built-in jobs are there by default, and a changed time or `enabled: false` keeps
    // the job.
    let mut c = Config::default();
    c.schedules.insert(
        "memory_decay".into(),
        ScheduleConfig {
            cron: Some("0 1 * * *".into()),
            ..ScheduleConfig::default()
        },
    );
    c.schedules.insert(
        "audit_verify".into(),
        ScheduleConfig {
            enabled: false,
            ..ScheduleConfig::default()
        },
    );
    let all = schedule::from_config(&c).expect("valid");
    let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "audit_verify",
            "goal_nudge",
            "health_check",
            "integrity_check",
            "memory_decay",
            "permission_check",
            "session_retention",
            "vault_check"
        ]
    );
    assert!(!all[0].enabled);
    // No ops services configured: the health check is there, switched off.
    assert!(!all[2].enabled);
    assert_eq!(all[4].action, Action::Job("memory_decay".into()));
    assert_eq!(all[4].when.describe(), "cron 0 1 * * * (UTC)");
}

/// A runner that counts runs and answers as told.
struct Runner {
    runs: AtomicUsize,
    answer: Mutex<Result<String, String>>,
    hold: Option<Arc<tokio::sync::Notify>>,
    sleep: Option<Duration>,
}

impl Runner {
    fn ok() -> Arc<Runner> {
        Arc::new(Runner {
            runs: AtomicUsize::new(0),
            answer: Mutex::new(Ok("done".into())),
            hold: None,
            sleep: None,
        })
    }
}

#[strata_engine::async_trait]
impl RunSchedule for Runner {
    async fn run(&self, _: &Schedule, _: i64) -> Result<String, String> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        if let Some(h) = &self.hold {
            h.notified().await;
        }
        if let Some(d) = self.sleep {
            tokio::time::sleep(d).await;
        }
        self.answer.lock().expect("lock").clone()
    }
}

fn every(name: &str, period: &str, catch_up: CatchUp) -> Schedule {
    Schedule {
        name: name.into(),
        when: When::every(period).expect("every"),
        action: Action::Job("memory_decay".into()),
        session: format!("schedule-{name}"),
        deliver_to: None,
        timeout: Duration::from_secs(60),
        jitter: Duration::ZERO,
        catch_up,
        enabled: true,
        principal: strata_engine::Principal::Operator,
        active_hours: None,
    }
}

fn scheduler(
    s: Schedule,
    store: &Arc<InMemorySchedules>,
    runner: &Arc<Runner>,
    me: &str,
) -> Arc<Scheduler> {
    Arc::new(Scheduler::new(vec![s], store.clone(), runner.clone(), me))
}

async fn tick(s: &Arc<Scheduler>, at: &str) -> usize {
    let tasks = s.tick(ts(at)).await;
    let n = tasks.len();
    for t in tasks {
        t.await.expect("run");
    }
    n
}

#[tokio::test]
async fn a_restart_that_missed_three_runs_catches_up_once_or_not_at_all() {
    for (catch_up, want) in [(CatchUp::Once, 1), (CatchUp::Skip, 0)] {
        let store = Arc::new(InMemorySchedules::default());
        let runner = Runner::ok();
        let first = scheduler(every("hourly", "1h", catch_up), &store, &runner, "a");
        first
            .start(ts("2026-12-03T10:00:00Z"))
            .await
            .expect("start");
        assert_eq!(tick(&first, "2026-12-03T10:30:00Z").await, 0, "not due yet");
        assert_eq!(tick(&first, "2026-12-03T11:00:00Z").await, 1);
        // Stopped; back 3.5 hours later: 12:00, 13:00 and 14:00 were missed.
        let again = scheduler(every("hourly", "1h", catch_up), &store, &runner, "a");
        again
            .start(ts("2026-12-03T14:30:00Z"))
            .await
            .expect("start");
        tick(&again, "2026-12-03T14:30:00Z").await;
        tick(&again, "2026-12-03T14:30:01Z").await;
        assert_eq!(runner.runs.load(Ordering::SeqCst), 1 + want, "{catch_up:?}");
        let st = &store.states().await.expect("states")[0];
        assert!(
            st.next_run
                .is_some_and(|n| n > ts("2026-12-03T14:30:01Z").as_second()),
            "{catch_up:?}: {st:?}"
        );
    }
}

#[tokio::test]
async fn a_run_still_going_is_not_started_again_and_the_missed_time_is_recorded() {
    let store = Arc::new(InMemorySchedules::default());
    let hold = Arc::new(tokio::sync::Notify::new());
    let runner = Arc::new(Runner {
        hold: Some(hold.clone()),
        ..Arc::into_inner(Runner::ok()).expect("one owner")
    });
    let s = scheduler(every("minutely", "1m", CatchUp::Once), &store, &runner, "a");
    s.start(ts("2026-12-03T10:00:00Z")).await.expect("start");
    let running = s.tick(ts("2026-12-03T10:01:00Z")).await;
    assert_eq!(running.len(), 1);
    while runner.runs.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    // Two more minutes pass while it runs: nothing new starts.
    assert!(s.tick(ts("2026-12-03T10:02:00Z")).await.is_empty());
    assert!(s.tick(ts("2026-12-03T10:03:00Z")).await.is_empty());
    assert_eq!(runner.runs.load(Ordering::SeqCst), 1);
    hold.notify_one();
    for t in running {
        t.await.expect("run");
    }
    let history = store.history("minutely", 10).await.expect("history");
    let runs: Vec<(String, &str)> = history
        .iter()
        .map(|r| {
            (
                Timestamp::from_second(r.due).expect("ts").to_string(),
                r.status.as_str(),
            )
        })
        .collect();
    assert_eq!(
        runs,
        [
            ("2026-12-03T10:03:00Z".to_owned(), "skipped"),
            ("2026-12-03T10:02:00Z".to_owned(), "skipped"),
            ("2026-12-03T10:01:00Z".to_owned(), "ok"),
        ]
    );
    let st = &store.states().await.expect("st")[0];
    assert_eq!(st.next_run, Some(ts("2026-12-03T10:04:00Z").as_second()));
}

#[tokio::test(start_paused = true)]
async fn a_run_past_its_timeout_is_cancelled() {
    let store = Arc::new(InMemorySchedules::default());
    let runner = Arc::new(Runner {
        sleep: Some(Duration::from_secs(3600)),
        ..Arc::into_inner(Runner::ok()).expect("one owner")
    });
    let mut sch = every("slow", "1h", CatchUp::Once);
    sch.timeout = Duration::from_secs(5);
    let s = scheduler(sch, &store, &runner, "a");
    s.start(ts("2026-12-03T10:00:00Z")).await.expect("start");
    assert_eq!(tick(&s, "2026-12-03T11:00:00Z").await, 1);
    let h = store.history("slow", 1).await.expect("history");
    assert_eq!(h[0].status, "timeout", "{h:?}");
    assert_eq!(
        store.states().await.expect("st")[0].last_status.as_deref(),
        Some("timeout")
    );
}

struct Alerts(Mutex<Vec<String>>);

impl strata_engine::audit::AlertSink for Alerts {
    fn alert(&self, a: &strata_engine::audit::Alert) {
        self.0.lock().expect("lock").push(a.message.clone());
    }
}

#[tokio::test]
async fn failures_in_a_row_back_off_and_raise_an_alert() {
    let store = Arc::new(InMemorySchedules::default());
    let runner = Runner::ok();
    *runner.answer.lock().expect("lock") = Err("the disk is full".into());
    let alerts = Arc::new(Alerts(Mutex::new(Vec::new())));
    let s = Arc::new(
        Scheduler::new(
            vec![every("flaky", "1m", CatchUp::Once)],
            store.clone(),
            runner.clone(),
            "a",
        )
        .with_alerts(vec![alerts.clone()]),
    );
    s.start(ts("2026-12-03T10:00:00Z")).await.expect("start");
    let mut t = ts("2026-12-03T10:01:00Z");
    let mut gaps = Vec::new();
    for _ in 0..3 {
        assert_eq!(tick(&s, &t.to_string()).await, 1);
        let next = store.states().await.expect("st")[0].next_run.expect("next");
        gaps.push(next - t.as_second());
        t = Timestamp::from_second(next).expect("ts");
    }
    // A minute, two, four: each failure doubles the wait.
    assert_eq!(gaps, [60, 120, 240]);
    let got = alerts.0.lock().expect("lock").clone();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        got[0].contains("failed 3 times") && got[0].contains("disk is full"),
        "{got:?}"
    );
    // Success resets the count.
    *runner.answer.lock().expect("lock") = Ok("fine".into());
    tick(&s, &t.to_string()).await;
    assert_eq!(store.states().await.expect("st")[0].failures, 0);
}

#[tokio::test]
async fn two_instances_run_a_due_schedule_once_and_a_dead_ones_run_is_taken_again() {
    let store = Arc::new(InMemorySchedules::default());
    let runner = Runner::ok();
    let a = scheduler(every("report", "1h", CatchUp::Once), &store, &runner, "a");
    let b = scheduler(every("report", "1h", CatchUp::Once), &store, &runner, "b");
    a.start(ts("2026-12-03T10:00:00Z")).await.expect("start");
    b.start(ts("2026-12-03T10:00:00Z")).await.expect("start");
    let (ta, tb) = tokio::join!(
        a.tick(ts("2026-12-03T11:00:00Z")),
        b.tick(ts("2026-12-03T11:00:00Z"))
    );
    assert_eq!(ta.len() + tb.len(), 1);
    for t in ta.into_iter().chain(tb) {
        t.await.expect("run");
    }
    assert_eq!(runner.runs.load(Ordering::SeqCst), 1);
    // An instance claimed 12:00 and died: nobody runs it until its claim lapses (the
    // timeout plus a minute), then another does.
    let due = ts("2026-12-03T12:00:00Z");
    assert!(
        store
            .claim(
                "report",
                due.as_second(),
                "dead",
                due.as_millisecond(),
                due.as_millisecond() + 120_000
            )
            .await
            .expect("claim")
    );
    assert_eq!(tick(&b, "2026-12-03T12:01:00Z").await, 0);
    assert_eq!(tick(&b, "2026-12-03T12:02:01Z").await, 1);
    assert_eq!(runner.runs.load(Ordering::SeqCst), 2);
    let h = store.history("report", 5).await.expect("history");
    assert_eq!((h[0].instance.as_str(), h[0].status.as_str()), ("b", "ok"));
}

#[tokio::test]
async fn a_paused_schedule_waits_and_run_now_makes_it_due() {
    let store = Arc::new(InMemorySchedules::default());
    let runner = Runner::ok();
    let s = scheduler(every("daily", "24h", CatchUp::Once), &store, &runner, "a");
    s.start(ts("2026-12-03T10:00:00Z")).await.expect("start");
    store.set_paused("daily", true).await.expect("pause");
    store
        .run_now("daily", ts("2026-12-03T10:05:00Z").as_second())
        .await
        .expect("run now");
    assert_eq!(tick(&s, "2026-12-03T10:05:00Z").await, 0, "paused");
    store.set_paused("daily", false).await.expect("resume");
    assert_eq!(tick(&s, "2026-12-03T10:05:01Z").await, 1);
    let st = &store.states().await.expect("st")[0];
    assert_eq!(st.next_run, Some(ts("2026-12-04T10:05:00Z").as_second()));
}

/// Asked to run within the second its last run was due: the new due time is the next
/// second, not one already run (which could never be claimed, leaving the schedule stuck).
#[tokio::test]
async fn run_now_in_the_second_of_the_last_run_runs_again() {
    let store = Arc::new(InMemorySchedules::default());
    let runner = Runner::ok();
    let s = scheduler(every("often", "1h", CatchUp::Once), &store, &runner, "a");
    s.start(ts("2026-12-03T10:00:00Z")).await.expect("start");
    let now = ts("2026-12-03T10:05:00Z").as_second();
    schedule::make_due(store.as_ref(), "often", now)
        .await
        .expect("run now");
    assert_eq!(tick(&s, "2026-12-03T10:05:00Z").await, 1);
    let again = schedule::make_due(store.as_ref(), "often", now)
        .await
        .expect("run now");
    assert_eq!(again, now + 1);
    assert_eq!(tick(&s, "2026-12-03T10:05:01Z").await, 1);
    assert_eq!(runner.runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_heartbeat_beats_only_in_its_active_hours() {
    let mut c = Config::default();
    c.defaults.timezone = Some("Europe/Stockholm".into());
    c.agents.insert(
        "ops".into(),
        strata_engine::config::AgentConfig {
            heartbeat: Some(strata_engine::config::HeartbeatConfig {
                every: "1h".into(),
                active_hours: Some("08:00-20:00".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let all = schedule::from_config(&c).expect("valid");
    let beat = all
        .into_iter()
        .find(|s| s.name == "heartbeat-ops")
        .expect("the heartbeat is a schedule");
    assert_eq!(
        beat.action,
        Action::Heartbeat {
            agent: "ops".into(),
            prompt_file: "HEARTBEAT.md".into()
        }
    );
    let store = Arc::new(InMemorySchedules::default());
    let runner = Runner::ok();
    let s = scheduler(beat, &store, &runner, "a");
    // 19:00 UTC is 20:00 in Stockholm in December: outside; 07:00 UTC is 08:00: inside.
    s.start(ts("2026-12-03T18:30:00Z")).await.expect("start");
    for hour in 19..=23 {
        assert_eq!(
            tick(&s, &format!("2026-12-03T{hour}:00:00Z")).await,
            0,
            "{hour}:00 UTC"
        );
    }
    for hour in 0..=6 {
        assert_eq!(
            tick(&s, &format!("2026-12-04T0{hour}:00:00Z")).await,
            0,
            "0{hour}:00 UTC"
        );
    }
    assert_eq!(tick(&s, "2026-12-04T07:00:00Z").await, 1);
    assert_eq!(runner.runs.load(Ordering::SeqCst), 1);
    // Bad hours and a path out of the agent's directory are named.
    let mut c = Config::default();
    c.agents.insert(
        "ops".into(),
        strata_engine::config::AgentConfig {
            heartbeat: Some(strata_engine::config::HeartbeatConfig {
                active_hours: Some("late".into()),
                prompt_file: "../../secrets".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
    );
    let p = schedule::from_config(&c).expect_err("refused").join("\n");
    assert!(p.contains("`agents.ops.heartbeat.active_hours`"), "{p}");
    assert!(p.contains("`agents.ops.heartbeat.prompt_file`"), "{p}");
}

/// A schedule that does not read says which part, with the message a person reads.
#[test]
fn a_bad_schedule_says_which_part() {
    use strata_runtime::schedule::{ActiveHours, ScheduleError};
    let utc = schedule::zone("UTC").expect("utc");
    let now = jiff::Timestamp::from_second(1_800_000_000).expect("now");
    assert!(matches!(
        schedule::zone("Mars/Olympus"),
        Err(ScheduleError::Zone(_))
    ));
    assert!(matches!(
        When::cron("61 * * * *", utc.clone()),
        Err(ScheduleError::Cron(_))
    ));
    assert!(matches!(
        When::every("500ms"),
        Err(ScheduleError::Period(_))
    ));
    assert!(matches!(
        schedule::duration("soon"),
        Err(ScheduleError::Period(_))
    ));
    let e = When::parse("whenever you like", &utc, now).expect_err("not a time");
    assert!(matches!(e, ScheduleError::Time(_)), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("`whenever you like` is not a time"),
        "{e}"
    );
    assert!(matches!(
        ActiveHours::parse("8 till late", utc),
        Err(ScheduleError::Hours(_))
    ));
}
