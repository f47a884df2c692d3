//! Drawing the state: header, flow table, footer, help and the empty and tiny-window states
//! (`table`, `header`, `footer`, `help`), the detail view of one flow (`detail`) and the fix's
//! confirmation panel (`fix_panel`). Reads the state and what the order and the panels work
//! out from it, nothing of the update step; the few layout facts a key needs (a page's height,
//! how far the verdict scrolls) it records in the state's view memory. Only the rows on screen
//! are put in order and formatted, so 10,000 flows cost no more to draw than 40.

mod detail;
mod fix_panel;
mod footer;
mod header;
mod help;
mod strips;
mod table;

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::widgets::{Paragraph, Widget, Wrap};
use ratatui::Frame;

use super::state::{AppState, Screen};
use crate::analysis::sample::CaState;

/// Below this the full layout cannot work; a one-paragraph summary is drawn instead.
pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 8;

pub const FLAG_MARK: &str = "⚑";
pub const CLOSED_MARK: &str = "×";

/// Draw the whole UI into a frame.
pub fn draw(frame: &mut Frame, state: &AppState) {
    frame.render_widget(state, frame.area());
}

impl Widget for &AppState {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
            render_tiny(self, area, buf);
            return;
        }
        let [header, body, footer] =
            Layout::vertical([Constraint::Length(2), Constraint::Min(0), Constraint::Length(1)]).areas(area);
        header::render(self, header, buf);
        match self.screen {
            Screen::Table => table::render(self, body, buf),
            Screen::Detail => detail::render(self, body, buf),
        }
        footer::render(self, footer, buf);
        if let Some(panel) = &self.fix_panel {
            fix_panel::render(panel, body, buf);
        }
        if self.help {
            help::render(self, area, buf);
        }
    }
}

pub(crate) fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

pub(crate) fn ca_color(ca: CaState) -> Color {
    match ca {
        CaState::Open => Color::Green,
        CaState::Disorder => Color::Yellow,
        CaState::Cwr => Color::Cyan,
        CaState::Recovery => Color::Magenta,
        CaState::Loss => Color::Red,
    }
}

fn render_tiny(state: &AppState, area: Rect, buf: &mut Buffer) {
    let mut text = format!("cctrace: {} flows", state.snapshot.len());
    if state.flagged_count > 0 {
        text.push_str(&format!(", {} {FLAG_MARK}", state.flagged_count));
    }
    if state.paused {
        text.push_str(" PAUSED");
    }
    text.push_str(&format!(" (window too small: need {MIN_WIDTH}x{MIN_HEIGHT})"));
    Paragraph::new(text).wrap(Wrap { trim: true }).render(area, buf);
}
