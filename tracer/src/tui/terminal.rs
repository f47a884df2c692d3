//! Taking over the terminal and giving it back. The guard restores it on drop, and a panic hook
//! (installed before the alternate screen is entered) restores it before the panic message is
//! printed, so the message lands on the normal screen instead of vanishing with the alternate
//! one, and the shell is never left in raw mode.

use std::io::{self, Stdout};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Once;

use anyhow::{Context, Result};
use crossterm::cursor::{Hide, Show};
use crossterm::execute;
use crossterm::terminal::{disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

pub type CrosstermTerminal = Terminal<CrosstermBackend<Stdout>>;

/// Whether the terminal is ours right now; the panic hook restores only then.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Leave the alternate screen, show the cursor, leave raw mode. Safe to call twice.
fn restore() -> io::Result<()> {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return Ok(());
    }
    let screen = execute!(io::stdout(), LeaveAlternateScreen, Show);
    let raw = disable_raw_mode();
    screen.and(raw)
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Best effort: if restoring fails there is nothing better to do than print anyway.
            let _ = restore();
            previous(info);
        }));
    });
}

/// The terminal in raw mode on the alternate screen, for as long as this lives.
pub struct TerminalGuard {
    terminal: CrosstermTerminal,
}

impl TerminalGuard {
    pub fn enter() -> Result<Self> {
        install_panic_hook();
        enable_raw_mode().context("switching the terminal to raw mode")?;
        ACTIVE.store(true, Ordering::SeqCst);
        // No guard exists yet, so until it does a failure undoes raw mode (and the screen) by hand.
        let mut stdout = io::stdout();
        if let Err(e) = execute!(stdout, EnterAlternateScreen, Hide) {
            let _ = restore();
            return Err(e).context("entering the alternate screen");
        }
        match Terminal::new(CrosstermBackend::new(stdout)) {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                let _ = restore();
                Err(e).context("setting up the terminal")
            }
        }
    }

    pub fn terminal(&mut self) -> &mut CrosstermTerminal {
        &mut self.terminal
    }

    /// Restore now and report failure (Drop can only ignore it).
    pub fn leave(self) -> Result<()> {
        let r = restore().context("restoring the terminal");
        drop(self);
        r
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = restore();
    }
}
