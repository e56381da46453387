//! This deployment's own tools. Each `#[tool]` here and in the other files of this directory
//! has the `overlay` layer and wins over a core or module tool of the same name.
//!
//! Every other `.rs` file here (and every directory with a `mod.rs`) is a module of its own:
//! `build.rs` lists them (`strata_build::tools`) and the line below compiles them in, so a
//! tool saved as `src/tools/count_words.rs` needs nothing else. `strata doctor` names a file
//! here that registered no tool.

include!(concat!(env!("OUT_DIR"), "/strata_tools.rs"));

use serde::Serialize;
use strata_engine::{ToolContext, ToolError, tool};

/// What this deployment's `system_info` returns: the `ops` module's report plus who we are.
#[derive(Debug, Serialize)]
pub struct DeploymentInfo {
    /// Fixed label of this deployment.
    pub deployment: &'static str,
    /// The overlay directory in use.
    pub overlay_dir: String,
    /// The module's report.
    #[serde(flatten)]
    pub host: strata_mod_ops::SystemInfo,
}

/// Reports this host (hostname, OS, kernel, uptime, load, CPUs, memory, data disk) and which
/// deployment and overlay this process runs. Shadows the `ops` module's `system_info` to show
/// how an overlay extends a module tool.
#[tool(capabilities = [read], side_effects = none, timeout_secs = 10)]
async fn system_info(ctx: &ToolContext) -> Result<DeploymentInfo, ToolError> {
    Ok(DeploymentInfo {
        deployment: "example",
        overlay_dir: ctx.env.overlay_dir.display().to_string(),
        host: strata_mod_ops::collect_system_info(ctx).await,
    })
}
