//! Standard output of the printing commands. A reader that went away (`akritas crds | head -1`)
//! ends the command quietly by SIGPIPE, as `git log | head` does (a shell prints nothing, and
//! `set -o pipefail` still sees that the output was cut), instead of a panic and a backtrace;
//! any other write error is one line on stderr and status 1.

use std::fmt;
use std::io::{self, StdoutLock, Write};

/// Prints `args` and a newline (`println!` that a closed pipe does not panic).
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::stdout::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;

/// Writes `args` and a newline.
pub(crate) fn line(args: fmt::Arguments<'_>) {
    with(|out| {
        out.write_fmt(args)?;
        out.write_all(b"\n")
    });
}

/// Writes `text` as it is.
pub(crate) fn text(text: &str) {
    with(|out| out.write_all(text.as_bytes()));
}

/// Runs `write` on the locked standard output, then flushes it.
pub(crate) fn with(write: impl FnOnce(&mut StdoutLock<'_>) -> io::Result<()>) {
    let mut out = io::stdout().lock();
    written(write(&mut out).and_then(|()| out.flush()));
}

/// Ends the process on a failed write: quietly for a closed pipe, else with the error.
pub(crate) fn written(result: io::Result<()>) {
    match result {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => die_of_sigpipe(),
        Err(error) => {
            eprintln!("akritas: cannot write to standard output: {error}");
            std::process::exit(1)
        }
    }
}

/// Ends the process by the signal a write to a closed pipe raises when it is not ignored (the
/// Rust runtime ignores it, so that the write returns `BrokenPipe` instead).
fn die_of_sigpipe() -> ! {
    // SAFETY: restoring a signal's default disposition and raising it on this process has no
    // memory effects; nothing runs after it.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::raise(libc::SIGPIPE);
    }
    // Not reached: SIGPIPE's default action ends the process; 128 + 13 is how a shell reports it.
    std::process::exit(141)
}
