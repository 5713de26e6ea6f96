//! The io drivers a case runs on, the once-per-process io_uring probe, and [`each_driver`].

use std::{sync::OnceLock, thread};

/// Which io driver a test case runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Epoll,
    IoUring,
}

impl Driver {
    pub fn name(self) -> &'static str {
        match self {
            Driver::Epoll => "epoll",
            Driver::IoUring => "io_uring",
        }
    }

    /// `false` (with a printed reason) when the kernel refuses io_uring here.
    pub fn available(self) -> bool {
        if self == Driver::Epoll {
            return true;
        }
        match io_uring_probe() {
            Ok(()) => true,
            Err(e) => {
                // Written straight to the process's stderr (not eprintln!, which libtest captures for
                // passing tests) so the skip and its reason show in the CI log.
                let _ = std::io::Write::write_all(
                    &mut std::io::stderr(),
                    format!("SKIP io_uring case: the kernel refuses io_uring here ({e})\n")
                        .as_bytes(),
                );
                false
            }
        }
    }
}

/// Whether this kernel creates an io_uring; probed once, on a thread of its own: a ring's teardown
/// queues task work that interrupts the creating thread's next blocking syscall with EINTR, which would
/// break the test's own reads.
fn io_uring_probe() -> &'static Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(|| {
        thread::spawn(|| {
            io_uring::IoUring::new(8)
                .map(drop)
                .map_err(|e| e.to_string())
        })
        .join()
        .unwrap()
    })
}

/// Runs `f` for each available driver.
pub fn each_driver(f: impl Fn(Driver)) {
    for d in [Driver::Epoll, Driver::IoUring] {
        if d.available() {
            f(d);
        }
    }
}
