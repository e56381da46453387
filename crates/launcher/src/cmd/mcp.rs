//! `strata mcp serve --stdio`.

use super::context::*;
use crate::Exit;

pub(crate) fn mcp_stdio(l: &Context, stdio: bool) -> Exit {
    if !stdio {
        eprintln!(
            "error: `strata mcp serve` needs --stdio; over HTTP, `strata serve` answers at /mcp"
        );
        return Exit::Usage;
    }
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    // stderr is free in stdio mode (stdout carries MCP): approval requests are shown there.
    let cli = match CliInvoker::open(l, &rt) {
        Ok(c) => c,
        Err(e) => return fail(&e),
    };
    let r = rt.block_on(strata_http::mcp::serve_stdio(cli.invoker.clone()));
    cli.finish(&rt);
    match r {
        Ok(()) => Exit::Ok,
        Err(e) => {
            eprintln!("error: {e}");
            Exit::Failure
        }
    }
}
