//! The runtime's services on an [`Env`], by name: the contract carries them by type only
//! ([`Env::provide`], [`Env::service`]).

use std::sync::Arc;

use strata_engine::Env;

use crate::goal::Goals;
use crate::hub::ConnectorHub;
use crate::journal::Journal;
use crate::schedule::ScheduleStore;
use crate::turns::{ActivityBoard, TurnRegistry};
use crate::usage::UsageMeter;

/// Typed access to the services the runtime keeps on an [`Env`].
pub trait EnvExt {
    /// Attaches the goal service (once; later calls are ignored).
    fn attach_goals(&self, goals: Arc<Goals>);
    /// The goal service, once attached (`serve` and the CLI attach it).
    fn goals(&self) -> Option<Arc<Goals>>;
    /// Attaches the schedules' store (once; later calls are ignored).
    fn attach_schedules(&self, store: Arc<dyn ScheduleStore>);
    /// Where schedules are kept (the `schedule_*` tools), once attached.
    fn schedules(&self) -> Option<Arc<dyn ScheduleStore>>;
    /// Sets where model calls' usage is priced and kept (once; later calls are ignored).
    fn attach_usage(&self, meter: Arc<UsageMeter>);
    /// Where model calls' usage goes, once attached.
    fn usage(&self) -> Option<Arc<UsageMeter>>;
    /// The running connectors and the agents' home channels (`send_message`,
    /// `send_to_agent`). Empty until connectors register.
    fn connectors(&self) -> Arc<ConnectorHub>;
    /// What running turns are doing (see [`ActivityBoard`]).
    fn activity(&self) -> Arc<ActivityBoard>;
    /// Turns in progress (see [`TurnRegistry`]).
    fn turns(&self) -> Arc<TurnRegistry>;
    /// Attaches the turn journal (once; later calls are ignored).
    fn attach_journal(&self, journal: Arc<Journal>);
    /// The turn journal, once attached (`journal.enabled`).
    fn journal(&self) -> Option<Arc<Journal>>;
}

impl EnvExt for Env {
    fn attach_goals(&self, goals: Arc<Goals>) {
        self.provide(goals);
    }
    fn goals(&self) -> Option<Arc<Goals>> {
        self.service()
    }
    fn attach_schedules(&self, store: Arc<dyn ScheduleStore>) {
        self.provide(store);
    }
    fn schedules(&self) -> Option<Arc<dyn ScheduleStore>> {
        self.service()
    }
    fn attach_usage(&self, meter: Arc<UsageMeter>) {
        self.provide(meter);
    }
    fn usage(&self) -> Option<Arc<UsageMeter>> {
        self.service()
    }
    fn connectors(&self) -> Arc<ConnectorHub> {
        self.service_or_default()
    }
    fn activity(&self) -> Arc<ActivityBoard> {
        self.service_or_default()
    }
    fn turns(&self) -> Arc<TurnRegistry> {
        self.service_or_default()
    }
    fn attach_journal(&self, journal: Arc<Journal>) {
        self.provide(journal);
    }
    fn journal(&self) -> Option<Arc<Journal>> {
        self.service()
    }
}
