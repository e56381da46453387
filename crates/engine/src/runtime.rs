//! The agent runtime under its historic paths (`strata_engine::runtime::…`), for code that
//! names them: the loop lives in [`crate::agent_loop`], the manager in [`crate::manager`],
//! turns in [`crate::turns`].

pub use crate::agent::is_no_reply;
pub use crate::agent_loop::LlmAgent;
pub use crate::manager::AgentManager;
pub use crate::scope::ToolFilter;
pub use crate::turns::{
    ActivityBoard, AgentDirectory, TurnInfo, TurnRegistry, TurnRequest, TurnTicket,
};
