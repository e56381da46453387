//! Loop and spam guards, per bot account. Time is passed in, so the rules are tested with a
//! synthetic clock.
//!
//! - **Chain breaker**: consecutive bot-triggered turns in a channel with no human message in
//!   between; over `bot_chain_limit` the channel stops answering bots until a human writes or
//!   `bot_chain_decay_seconds` pass without bot traffic.
//! - **Repeat/rate mute**: a bot that sends the same (normalised) content three times in a
//!   row, or more than 5 messages in 60 s, is ignored for 600 s.
//! - **Outgoing de-duplication**: the same text to the same channel within 120 s is dropped.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

const RATE_WINDOW: Duration = Duration::from_secs(60);
const RATE_MAX: usize = 5;
const REPEAT_MAX: u32 = 3;
const MUTE: Duration = Duration::from_secs(600);
const OUT_DEDUP: Duration = Duration::from_secs(120);

/// Why an incoming message is not answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drop {
    /// The channel's bot chain is over the limit.
    Chain(u32),
    /// The sending bot is muted (until the given instant).
    Muted,
}

#[derive(Default)]
struct Chain {
    count: u32,
    last: Option<Instant>,
}

#[derive(Default)]
struct Bot {
    recent: VecDeque<Instant>,
    last_text: String,
    repeats: u32,
    muted_until: Option<Instant>,
}

/// The guards of one account.
pub struct Guards {
    chain_limit: u32,
    chain_decay: Duration,
    chains: HashMap<String, Chain>,
    bots: HashMap<String, Bot>,
    sent: HashMap<(String, String), Instant>,
}

/// Lower case, whitespace collapsed: "the same content" for the repeat rule and for outgoing
/// de-duplication.
pub fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

impl Guards {
    /// Guards with the chain settings from `connectors.discord`.
    pub fn new(chain_limit: u32, chain_decay_secs: u64) -> Self {
        Guards {
            chain_limit: chain_limit.max(1),
            chain_decay: Duration::from_secs(chain_decay_secs.max(1)),
            chains: HashMap::new(),
            bots: HashMap::new(),
            sent: HashMap::new(),
        }
    }

    /// Decides on an incoming message that would start a turn. A human's message resets
    /// the channel's chain.
    pub fn inbound(
        &mut self,
        now: Instant,
        channel: &str,
        author: &str,
        is_bot: bool,
        text: &str,
    ) -> Result<(), Drop> {
        self.inbound_in(now, channel, author, is_bot, text, true)
    }

    /// [`Guards::inbound`]; without `chain` (a goal's channel, whose turn budget stands in
    /// for the chain breaker) only the repeat/rate mute applies.
    pub fn inbound_in(
        &mut self,
        now: Instant,
        channel: &str,
        author: &str,
        is_bot: bool,
        text: &str,
        chain: bool,
    ) -> Result<(), Drop> {
        if !is_bot {
            self.chains.remove(channel);
            return Ok(());
        }
        let bot = self.bots.entry(author.to_owned()).or_default();
        if bot.muted_until.is_some_and(|t| now < t) {
            return Err(Drop::Muted);
        }
        bot.muted_until = None;
        while bot
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > RATE_WINDOW)
        {
            bot.recent.pop_front();
        }
        bot.recent.push_back(now);
        let norm = normalise(text);
        if norm == bot.last_text {
            bot.repeats += 1;
        } else {
            bot.last_text = norm;
            bot.repeats = 1;
        }
        if bot.recent.len() > RATE_MAX || bot.repeats >= REPEAT_MAX {
            bot.muted_until = Some(now + MUTE);
            bot.recent.clear();
            bot.repeats = 0;
            tracing::warn!(bot = %author, "Discord bot muted for 600 s (repeat or rate)");
            return Err(Drop::Muted);
        }
        if !chain {
            return Ok(());
        }
        let chain = self.chains.entry(channel.to_owned()).or_default();
        if chain
            .last
            .is_some_and(|t| now.duration_since(t) >= self.chain_decay)
        {
            chain.count = 0;
        }
        chain.last = Some(now);
        chain.count += 1;
        if chain.count > self.chain_limit {
            return Err(Drop::Chain(chain.count));
        }
        Ok(())
    }

    /// Whether `text` may go to `channel` now (false: the same text went there within 120 s).
    pub fn outgoing(&mut self, now: Instant, channel: &str, text: &str) -> bool {
        self.sent.retain(|_, t| now.duration_since(*t) < OUT_DEDUP);
        let key = (channel.to_owned(), normalise(text));
        if self.sent.contains_key(&key) {
            return false;
        }
        self.sent.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, secs: u64) -> Instant {
        base + Duration::from_secs(secs)
    }

    #[test]
    fn the_chain_breaks_over_the_limit_and_heals() {
        let t0 = Instant::now();
        let mut g = Guards::new(3, 300);
        // Different bots, different texts, slow enough for the rate rule.
        for i in 0..3 {
            assert_eq!(
                g.inbound(
                    at(t0, i * 20),
                    "c",
                    &format!("b{i}"),
                    true,
                    &format!("m{i}")
                ),
                Ok(())
            );
        }
        assert_eq!(
            g.inbound(at(t0, 70), "c", "b9", true, "again"),
            Err(Drop::Chain(4))
        );
        // Another channel is unaffected.
        assert_eq!(g.inbound(at(t0, 71), "d", "b9", true, "elsewhere"), Ok(()));
        // A human resets it.
        assert_eq!(g.inbound(at(t0, 72), "c", "alice", false, "hi"), Ok(()));
        assert_eq!(g.inbound(at(t0, 80), "c", "b8", true, "fresh"), Ok(()));
        // Or silence for the decay period.
        for i in 0..3 {
            let _ = g.inbound(
                at(t0, 90 + i * 20),
                "c",
                &format!("x{i}"),
                true,
                &format!("n{i}"),
            );
        }
        assert!(g.inbound(at(t0, 160), "c", "y", true, "over").is_err());
        assert_eq!(
            g.inbound(at(t0, 460), "c", "z", true, "after quiet"),
            Ok(())
        );
    }

    #[test]
    fn repeating_or_chatty_bots_are_muted_for_ten_minutes() {
        let t0 = Instant::now();
        let mut g = Guards::new(100, 300);
        assert_eq!(g.inbound(at(t0, 0), "c", "b", true, "Ping!"), Ok(()));
        assert_eq!(g.inbound(at(t0, 10), "c", "b", true, "  ping! "), Ok(()));
        assert_eq!(
            g.inbound(at(t0, 20), "c", "b", true, "PING!"),
            Err(Drop::Muted)
        );
        assert_eq!(
            g.inbound(at(t0, 500), "c", "b", true, "something new"),
            Err(Drop::Muted)
        );
        assert_eq!(
            g.inbound(at(t0, 621), "c", "b", true, "something new"),
            Ok(())
        );
        // Six messages in a minute.
        let mut g = Guards::new(100, 300);
        for i in 0..5 {
            assert_eq!(
                g.inbound(at(t0, i), "c", "r", true, &format!("m{i}")),
                Ok(())
            );
        }
        assert_eq!(g.inbound(at(t0, 6), "c", "r", true, "m6"), Err(Drop::Muted));
        // Humans are never muted.
        for i in 0..20 {
            assert_eq!(g.inbound(at(t0, i), "c", "alice", false, "same"), Ok(()));
        }
    }

    #[test]
    fn the_same_text_to_the_same_channel_goes_once_in_two_minutes() {
        let t0 = Instant::now();
        let mut g = Guards::new(12, 300);
        assert!(g.outgoing(t0, "c", "Deployed."));
        assert!(!g.outgoing(at(t0, 60), "c", "deployed. "));
        assert!(g.outgoing(at(t0, 60), "d", "Deployed."));
        assert!(g.outgoing(at(t0, 121), "c", "Deployed."));
    }
}
