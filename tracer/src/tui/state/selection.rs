//! The selection: by cookie, so it follows its flow while rows move, with its place in the
//! display order; and the detail view opened on it and closed back to it.

use super::grouping::TableLine;
use super::rows::FlowRow;
use super::{AppState, Screen};

impl AppState {
    /// The table line the selection is on.
    pub(crate) fn selected_line(&self) -> usize {
        self.lines.iter().position(|l| *l == TableLine::Flow(self.sel_pos)).unwrap_or(0)
    }

    /// Keep the selection on its flow after the order changed; where it went, on the row now
    /// at its place.
    pub(crate) fn fix_selection(&mut self) {
        if self.visible.is_empty() {
            // Keep the cookie: when a filter is cleared the selection comes back.
            self.sel_pos = 0;
            return;
        }
        match self.selected.and_then(|c| self.visible.position_of(c)) {
            Some(p) => self.sel_pos = p,
            None => {
                self.sel_pos = self.sel_pos.min(self.visible.len() - 1);
                self.selected = Some(self.snapshot[self.visible.get(self.sel_pos)].cookie);
            }
        }
    }

    /// Select the visible row at `pos` (clamped).
    pub(crate) fn select_pos(&mut self, pos: usize) {
        if self.visible.is_empty() {
            return;
        }
        self.sel_pos = pos.min(self.visible.len() - 1);
        self.selected = Some(self.snapshot[self.visible.get(self.sel_pos)].cookie);
    }

    pub(crate) fn move_selection(&mut self, delta: isize) {
        let pos = self.sel_pos.saturating_add_signed(delta);
        self.select_pos(pos);
    }

    pub(crate) fn selected_row(&self) -> Option<&FlowRow> {
        let pos = self.sel_pos;
        (pos < self.visible.len())
            .then(|| &self.snapshot[self.visible.get(pos)])
            .filter(|r| Some(r.cookie) == self.selected)
    }

    pub(crate) fn open_detail(&mut self) {
        if let Some(cookie) = self.selected_row().map(|r| r.cookie) {
            self.detail_cookie = Some(cookie);
            self.detail_scroll = 0;
            self.screen = Screen::Detail;
        }
    }

    pub(crate) fn close_detail(&mut self) {
        self.screen = Screen::Table;
        if let Some(c) = self.detail_cookie.take() {
            // Back on the table, the flow just looked at stays selected if it is still listed.
            if self.visible.position_of(c).is_some() {
                self.selected = Some(c);
                self.fix_selection();
            }
        }
    }
}
