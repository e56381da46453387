//! Which agents a Discord message goes to (`agents.<id>.routing.discord`).

use std::collections::BTreeMap;

use strata_engine::config::DiscordRouting;
use strata_engine::connector::InboundMessage;

/// The agents (of one bot account) that should answer `msg`, by priority: agents listing
/// the channel exactly; else agents listing its `category` (the channel's parent); else
/// agents with a wildcard (`channels: []`); direct messages go to every agent bound to the
/// account. Filters: `guilds`, `users`, `mentions` (only DMs and @mentions). When several
/// agents match at the winning level, each gets the message.
pub fn route(
    msg: &InboundMessage,
    category: Option<&str>,
    routes: &BTreeMap<String, DiscordRouting>,
) -> Vec<String> {
    let passes = |r: &DiscordRouting| {
        if !r.users.is_empty() && !r.users.contains(&msg.sender_id) {
            return false;
        }
        if let Some(g) = &msg.guild_id
            && !r.guilds.is_empty()
            && !r.guilds.contains(g)
        {
            return false;
        }
        !r.mentions || msg.guild_id.is_none() || msg.mentions_me
    };
    let candidates: Vec<(&String, &DiscordRouting)> =
        routes.iter().filter(|(_, r)| passes(r)).collect();
    if msg.guild_id.is_none() {
        return candidates.into_iter().map(|(id, _)| id.clone()).collect();
    }
    let exact: Vec<String> = candidates
        .iter()
        .filter(|(_, r)| {
            r.channels
                .as_ref()
                .is_some_and(|c| c.contains(&msg.channel_id))
        })
        .map(|(id, _)| (*id).clone())
        .collect();
    if !exact.is_empty() {
        return exact;
    }
    if let Some(cat) = category {
        let by_category: Vec<String> = candidates
            .iter()
            .filter(|(_, r)| r.categories.iter().any(|c| c == cat))
            .map(|(id, _)| (*id).clone())
            .collect();
        if !by_category.is_empty() {
            return by_category;
        }
    }
    candidates
        .into_iter()
        .filter(|(_, r)| r.channels.as_ref().is_some_and(Vec::is_empty))
        .map(|(id, _)| id.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(channel: &str, guild: Option<&str>, sender: &str, mentions: bool) -> InboundMessage {
        InboundMessage {
            connector: "discord:main".into(),
            channel_id: channel.into(),
            message_id: "1".into(),
            sender_id: sender.into(),
            sender_is_bot: false,
            text: "hi".into(),
            guild_id: guild.map(str::to_owned),
            mentions_me: mentions,
        }
    }

    fn r(channels: Option<&[&str]>) -> DiscordRouting {
        DiscordRouting {
            account: "main".into(),
            channels: channels.map(|c| c.iter().map(|s| (*s).to_owned()).collect()),
            ..Default::default()
        }
    }

    fn route_(m: &InboundMessage, routes: &BTreeMap<String, DiscordRouting>) -> Vec<String> {
        route(m, Some("cat-1"), routes)
    }

    #[test]
    fn categories_sit_between_exact_channels_and_wildcards() {
        let mut routes = BTreeMap::new();
        let mut c = r(None);
        c.categories = vec!["cat-1".into()];
        routes.insert("support".to_owned(), c);
        routes.insert("helper".to_owned(), r(Some(&[])));
        routes.insert("ops".to_owned(), r(Some(&["100"])));
        let m = msg("200", Some("9"), "u", false);
        assert_eq!(route(&m, Some("cat-1"), &routes), ["support"]);
        assert_eq!(route(&m, Some("cat-2"), &routes), ["helper"]);
        assert_eq!(route(&m, None, &routes), ["helper"]);
        assert_eq!(
            route(&msg("100", Some("9"), "u", false), Some("cat-1"), &routes),
            ["ops"]
        );
    }

    #[test]
    fn exact_beats_wildcard_and_dms_reach_every_bound_agent() {
        let mut routes = BTreeMap::new();
        routes.insert("ops".to_owned(), r(Some(&["100"])));
        routes.insert("helper".to_owned(), r(Some(&[])));
        routes.insert("quiet".to_owned(), r(None));
        assert_eq!(route_(&msg("100", Some("9"), "u", false), &routes), ["ops"]);
        assert_eq!(
            route_(&msg("200", Some("9"), "u", false), &routes),
            ["helper"]
        );
        assert_eq!(
            route_(&msg("dm", None, "u", false), &routes),
            ["helper", "ops", "quiet"]
        );
        // Two agents on the same channel both get it.
        routes.insert("ops2".to_owned(), r(Some(&["100", "101"])));
        assert_eq!(
            route_(&msg("100", Some("9"), "u", false), &routes),
            ["ops", "ops2"]
        );
    }

    #[test]
    fn filters_guilds_users_and_mentions() {
        let mut routes = BTreeMap::new();
        let mut a = r(Some(&[]));
        a.guilds = vec!["9".into()];
        a.users = vec!["alice".into()];
        a.mentions = true;
        routes.insert("a".to_owned(), a);
        assert!(
            route_(&msg("1", Some("9"), "alice", false), &routes).is_empty(),
            "no mention"
        );
        assert_eq!(route_(&msg("1", Some("9"), "alice", true), &routes), ["a"]);
        assert!(
            route_(&msg("1", Some("8"), "alice", true), &routes).is_empty(),
            "other guild"
        );
        assert!(
            route_(&msg("1", Some("9"), "bob", true), &routes).is_empty(),
            "other user"
        );
        assert_eq!(
            route_(&msg("dm", None, "alice", false), &routes),
            ["a"],
            "DMs need no mention"
        );
    }
}
