//! The Landlock ruleset, built in the parent; the child only calls `landlock_restrict_self`.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, path_beneath_rules,
};

/// Reads and execution under `read`, everything under `write`, `/dev/null` read-write; TCP
/// bind/connect denied unless `network`; signals and abstract sockets scoped. Best effort
/// per kernel ABI; an error when the kernel enforces nothing.
pub(crate) fn ruleset(
    read: &[PathBuf],
    write: &[PathBuf],
    network: bool,
) -> Result<OwnedFd, String> {
    let abi = ABI::V6;
    let err = |e: landlock::RulesetError| format!("landlock: {e}");
    let mut rs = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?;
    if !network {
        rs = rs.handle_access(AccessNet::from_all(abi)).map_err(err)?;
    }
    rs = rs.scope(Scope::from_all(abi)).map_err(err)?;
    let created = rs
        .create()
        .map_err(err)?
        .add_rules(path_beneath_rules(read, AccessFs::from_read(abi)))
        .map_err(err)?
        .add_rules(path_beneath_rules(write, AccessFs::from_all(abi)))
        .map_err(err)?
        .add_rules(path_beneath_rules(
            ["/dev/null", "/dev/zero", "/dev/urandom"],
            AccessFs::from_all(abi),
        ))
        .map_err(err)?;
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| "landlock: the kernel enforces no ruleset".to_owned())
}
