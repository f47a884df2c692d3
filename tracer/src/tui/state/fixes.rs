//! What the UI knows of fixing: the confirmation panel while it is open (the plan the host
//! side made and what the user ticked), and the fixes applied and undone, for the charts and
//! the recorder. The panel's keys are the update step's, its drawing the view's.

use super::{AppState, Screen};
use crate::analysis::fix_plan::Plan;
use crate::analysis::schema::{ActionKind, ActionRecord};

/// The confirmation panel: nothing changes on the host until Enter.
#[derive(Clone, Debug)]
pub(crate) struct FixPanel {
    /// The flow `f` was pressed on (the detail view opens on it once applied).
    pub cookie: u64,
    /// What the host side said it would do; `plan.live` is the checkbox.
    pub plan: Plan,
    /// The host's own namespace needs this second confirmation (`h`).
    pub host_confirmed: bool,
}

impl FixPanel {
    /// The checkbox starts on for a flagged flow only: for the others the user opts in.
    pub(crate) fn new(cookie: u64, mut plan: Plan, flagged: bool) -> Self {
        plan.live = flagged;
        Self { cookie, plan, host_confirmed: false }
    }

    /// Why Enter cannot apply yet, if it cannot.
    pub(crate) fn blocked(&self) -> Option<&'static str> {
        (self.plan.target.host && !self.host_confirmed)
            .then_some("this is the host's own namespace: press h to confirm that first")
    }
}

impl AppState {
    /// The plan the host side made for `f` on flow `cookie`: the confirmation panel opens on
    /// it, or the status line says why there is none.
    pub fn fix_planned(&mut self, cookie: u64, flagged: bool, plan: Result<Plan, String>) {
        match plan {
            Ok(plan) => self.fix_panel = Some(FixPanel::new(cookie, plan, flagged)),
            Err(e) => self.status = Some(format!("cannot fix: {e}")),
        }
    }

    /// The panel's plan, as confirmed (`None` when no panel is open).
    pub(crate) fn confirmed_plan(&mut self) -> Option<(u64, Plan)> {
        self.fix_panel.take().map(|p| (p.cookie, p.plan))
    }

    /// What applying or undoing a fix did: kept for the charts and the recorder, summed up on
    /// the status line; after a fix the detail view opens on the flow `f` was pressed on.
    pub fn fix_done(&mut self, cookie: Option<u64>, result: Result<ActionRecord, String>) {
        match result {
            Ok(action) => {
                log::info!("{}", action.headline());
                self.status = Some(action.headline());
                if let (Some(cookie), ActionKind::Fix) = (cookie, action.action) {
                    self.detail_cookie = Some(cookie);
                    self.detail_scroll = 0;
                    self.screen = Screen::Detail;
                }
                self.unrecorded.push(action.clone());
                self.actions.push(action);
            }
            Err(e) => self.status = Some(format!("nothing changed: {e}")),
        }
    }

    /// An action a recording played back says was taken at this point.
    pub fn action_replayed(&mut self, action: ActionRecord) {
        self.actions.push(action);
    }

    /// Actions taken since last asked, for a recorder.
    pub fn take_actions(&mut self) -> Vec<ActionRecord> {
        std::mem::take(&mut self.unrecorded)
    }

    /// A fix was applied here (so `u` has something to undo, unless it was undone).
    pub(crate) fn fixed_any(&self) -> bool {
        self.actions.iter().any(|a| a.action == ActionKind::Fix)
    }
}
