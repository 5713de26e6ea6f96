//! The `edge` binary: parse the CLI, load the configuration, start the workers (DESIGN.md "CLI").

use clap::Parser;
use edge_frontend::{
    load_config, process::cli::Cli, process::cli::Command, EXIT_CONFIG, EXIT_OK, EXIT_RUNTIME,
};

/// Bench mode only (`--features count-alloc`): counts allocations per thread (edge-bench alloc).
#[cfg(feature = "count-alloc")]
#[global_allocator]
static ALLOCATOR: edge_frontend::process::alloc_count::Counting =
    edge_frontend::process::alloc_count::Counting;

/// jemalloc: per-thread caches and arenas suit a thread per core that allocates what h2 and rustls
/// allocate per stream and per record (bench/README.md "Allocator" has the A/B against glibc).
#[cfg(not(feature = "count-alloc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (its `malloc_conf` symbol, read at startup): pages freed go back to the kernel
/// at once (`dirty_decay_ms:0`, `muzzy_decay_ms:0`) rather than after jemalloc's default 10 s, so
/// memory taken by a burst of connections returns when the buffer pools trim (DESIGN.md "Fault
/// matrix": VmRSS settles after every case). edge pools its large buffers, so purges are rare.
#[cfg(not(feature = "count-alloc"))]
#[export_name = "_rjem_malloc_conf"]
static MALLOC_CONF: MallocConf = MallocConf(c"dirty_decay_ms:0,muzzy_decay_ms:0".as_ptr());

/// A C string pointer that can be a `static` (jemalloc only reads it).
#[cfg(not(feature = "count-alloc"))]
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a 'static C string literal, never written.
#[cfg(not(feature = "count-alloc"))]
unsafe impl Sync for MallocConf {}

fn main() {
    let cli = Cli::parse();
    if let Some(Command::Healthcheck { url }) = &cli.command {
        let url = match url {
            Some(u) => u.clone(),
            None => match load_config(cli.config.as_deref(), &cli.overrides()) {
                Ok(r) => edge_frontend::process::cli::health_url(&r),
                Err(errors) => {
                    for e in &errors {
                        eprintln!("edge healthcheck: config error: {e}");
                    }
                    std::process::exit(EXIT_CONFIG);
                }
            },
        };
        std::process::exit(match edge_frontend::process::cli::healthcheck(&url) {
            Ok(200) => EXIT_OK,
            Ok(status) => {
                eprintln!("edge healthcheck: {url} answered {status}");
                EXIT_RUNTIME
            }
            Err(e) => {
                eprintln!("edge healthcheck: {e}");
                EXIT_RUNTIME
            }
        });
    }
    if cli.print_default_config {
        print_out(edge_core::config::DEFAULT_CONFIG);
        return;
    }
    let resolved = match load_config(cli.config.as_deref(), &cli.overrides()) {
        Ok(r) => r,
        Err(errors) => {
            for e in &errors {
                eprintln!("edge: config error: {e}");
            }
            std::process::exit(EXIT_CONFIG);
        }
    };
    if cli.check {
        let mut out = resolved.config.to_toml();
        // The compiled routes as TOML comments, so the output still reads back as the config.
        out.push_str("\n# Routes in match order (DESIGN.md \"Routing\"):\n");
        for line in resolved.routes.listing().lines() {
            out.push_str(&format!("# {line}\n"));
        }
        print_out(&out);
        for warning in resolved.routes.warnings() {
            eprintln!("edge: warning: {warning}");
        }
        for name in &resolved.unresolved {
            eprintln!(
                "edge: warning: {name} (edge starts without it, answers 503 for an upstream with no address, and keeps resolving)"
            );
        }
        eprintln!("edge: configuration OK");
        return;
    }
    let source = edge_frontend::process::reload::ConfigSource {
        path: cli.config.clone(),
        overrides: cli.overrides(),
    };
    std::process::exit(edge_frontend::start(resolved, source, cli.upgrade));
}

/// Writes `text` to standard output. A reader that stops early (`edge --check | head`) closes the pipe:
/// that is not an error of the command, whose verdict goes to standard error, so a broken pipe ends the
/// output quietly instead of panicking as `print!` does.
fn print_out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("edge: writing to standard output: {e}");
        }
    }
}
