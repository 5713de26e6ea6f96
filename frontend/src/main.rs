//! The `edge` binary: parse the CLI, load the configuration, start the workers (DESIGN.md "CLI").

use clap::Parser;
use edge_frontend::{cli::Cli, cli::Command, load_config, EXIT_CONFIG, EXIT_OK, EXIT_RUNTIME};

/// Bench mode only (`--features count-alloc`): counts allocations per thread (edge-bench alloc).
#[cfg(feature = "count-alloc")]
#[global_allocator]
static ALLOCATOR: edge_frontend::alloc_count::Counting = edge_frontend::alloc_count::Counting;

/// jemalloc: per-thread caches and arenas suit a thread per core that allocates what h2 and rustls
/// allocate per stream and per record (bench/README.md "Allocator" has the A/B against glibc).
#[cfg(not(feature = "count-alloc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() {
    let cli = Cli::parse();
    if let Some(Command::Healthcheck { url }) = &cli.command {
        let url = match url {
            Some(u) => u.clone(),
            None => match load_config(cli.config.as_deref(), &cli.overrides()) {
                Ok(r) => edge_frontend::cli::health_url(&r),
                Err(errors) => {
                    for e in &errors {
                        eprintln!("edge healthcheck: config error: {e}");
                    }
                    std::process::exit(EXIT_CONFIG);
                }
            },
        };
        std::process::exit(match edge_frontend::cli::healthcheck(&url) {
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
        print!("{}", edge_core::config::DEFAULT_CONFIG);
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
        print!("{}", resolved.config.to_toml());
        eprintln!("edge: configuration OK");
        return;
    }
    let source = edge_frontend::reload::ConfigSource {
        path: cli.config.clone(),
        overrides: cli.overrides(),
    };
    std::process::exit(edge_frontend::start(resolved, source, cli.upgrade));
}
