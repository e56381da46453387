//! How each vendor says why a completion stopped, mapped onto [`StopReason`] in one place.

use strata_engine::llm::StopReason;

/// A vendor's stop-reason vocabulary.
pub(crate) struct StopMap {
    /// Words meaning "the model called tools".
    pub tool_use: &'static [&'static str],
    /// Words meaning "cut at the token limit".
    pub max_tokens: &'static [&'static str],
    /// Words meaning "finished"; no word at all means finished too.
    pub end_turn: &'static [&'static str],
    /// Tool calls in the answer win over any word (Gemini says `STOP` with calls).
    pub calls_first: bool,
}

impl StopMap {
    /// The stop reason for `raw`, given whether the answer holds tool calls. Unknown words are
    /// `ToolUse` when there are calls, else `Other`.
    pub(crate) fn map(&self, raw: Option<&str>, has_calls: bool) -> StopReason {
        if self.calls_first && has_calls {
            return StopReason::ToolUse;
        }
        match raw {
            Some(w) if self.tool_use.contains(&w) => StopReason::ToolUse,
            Some(w) if self.max_tokens.contains(&w) => StopReason::MaxTokens,
            Some(w) if self.end_turn.contains(&w) => StopReason::EndTurn,
            _ if has_calls => StopReason::ToolUse,
            None => StopReason::EndTurn,
            Some(_) => StopReason::Other,
        }
    }
}

/// OpenAI chat completions' `finish_reason`.
pub(crate) const OPENAI: StopMap = StopMap {
    tool_use: &["tool_calls", "function_call"],
    max_tokens: &["length"],
    end_turn: &["stop"],
    calls_first: false,
};

/// Anthropic Messages' `stop_reason`.
pub(crate) const ANTHROPIC: StopMap = StopMap {
    tool_use: &["tool_use"],
    max_tokens: &["max_tokens"],
    end_turn: &["end_turn", "stop_sequence"],
    calls_first: false,
};

/// Gemini's `finishReason`.
pub(crate) const GEMINI: StopMap = StopMap {
    tool_use: &[],
    max_tokens: &["MAX_TOKENS"],
    end_turn: &["STOP"],
    calls_first: true,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_vendor_maps_its_words() {
        assert_eq!(OPENAI.map(Some("length"), false), StopReason::MaxTokens);
        assert_eq!(OPENAI.map(Some("stop"), true), StopReason::EndTurn);
        assert_eq!(OPENAI.map(Some("weird"), true), StopReason::ToolUse);
        assert_eq!(OPENAI.map(Some("weird"), false), StopReason::Other);
        assert_eq!(OPENAI.map(None, false), StopReason::EndTurn);
        assert_eq!(
            ANTHROPIC.map(Some("stop_sequence"), false),
            StopReason::EndTurn
        );
        assert_eq!(ANTHROPIC.map(Some("tool_use"), false), StopReason::ToolUse);
        assert_eq!(GEMINI.map(Some("STOP"), true), StopReason::ToolUse);
        assert_eq!(GEMINI.map(Some("MAX_TOKENS"), false), StopReason::MaxTokens);
        assert_eq!(GEMINI.map(Some("SAFETY"), false), StopReason::Other);
        assert_eq!(GEMINI.map(None, false), StopReason::EndTurn);
    }
}
