//! The admin listener (DESIGN.md "Process model", "Metrics"): its own unpinned thread with its own small
//! monoio runtime (epoll), at most 64 connections, not counted in `edge_connections_*`. Serves
//! `GET /metrics` (Prometheus text rendered from the recorder), `GET /_health` (readiness), `GET /_live`
//! (liveness), `GET /config` (the effective configuration as TOML, DESIGN.md "Observability": the
//! configuration holds certificate and key files as paths only, so no key material is printed) and
//! `GET /upstreams` (JSON, [`crate::process::admin_upstreams`]); `HEAD`
//! answers each like `GET` without the body (load balancers probe with HEAD). Also runs the recorder's
//! upkeep so histograms do not grow without scrapes.

use std::{
    cell::Cell,
    rc::Rc,
    sync::{mpsc, Arc},
    time::Duration,
};

use edge_core::{buf::RecvBuf, http::head::parse_request, runtime::Shared};
use metrics_exporter_prometheus::PrometheusHandle;
use monoio::{
    io::AsyncWriteRentExt,
    net::{TcpListener, TcpStream},
};

/// Most admin connections served at once.
const MAX_ADMIN_CONNECTIONS: usize = 64;
/// Deadline for one admin request and its response.
const ADMIN_DEADLINE: Duration = Duration::from_secs(5);

/// Starts the admin thread on an already bound listener; returns once it serves.
///
/// # Errors
/// When the thread or its runtime cannot start.
pub fn start(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    prom: PrometheusHandle,
) -> Result<(), String> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("edge-admin".into())
        .spawn(move || {
            let run = async move {
                let l = match listener
                    .set_nonblocking(true)
                    .and_then(|()| TcpListener::from_std(listener))
                {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = tx.send(Err(format!("admin listener: {e}")));
                        return;
                    }
                };
                let _ = tx.send(Ok(()));
                serve(l, shared, prom).await;
            };
            if let Err(e) = edge_core::runtime::block_on(edge_core::runtime::IoDriver::Epoll, run) {
                tracing::error!(event = "admin.failed", error = %e);
            }
        })
        .map_err(|e| format!("admin thread: {e}"))?;
    rx.recv_timeout(Duration::from_secs(5))
        .map_err(|_| "admin thread did not start".to_string())?
}

async fn serve(l: TcpListener, shared: Arc<Shared>, prom: PrometheusHandle) {
    let prom = Rc::new(prom);
    let active = Rc::new(Cell::new(0usize));
    let upkeep = prom.clone();
    monoio::spawn(async move {
        loop {
            monoio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    // After an upgrade handover the admin socket belongs to the new process too: stop accepting so
    // probes and scrapes reach it. (On this epoll runtime dropping a pending accept loses nothing: the
    // accept syscall runs only when the future is polled.)
    let mut stop = std::pin::pin!(async {
        while !shared
            .handed_over
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            monoio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    loop {
        let accepted = monoio::select! {
            r = l.accept() => r,
            () = &mut stop => return,
        };
        let Ok((stream, _)) = accepted else {
            continue;
        };
        if active.get() >= MAX_ADMIN_CONNECTIONS {
            drop(stream);
            continue;
        }
        active.set(active.get() + 1);
        let (shared, prom, active) = (shared.clone(), prom.clone(), active.clone());
        monoio::spawn(async move {
            let _ = edge_core::clock::timeout(ADMIN_DEADLINE, handle(stream, &shared, &prom)).await;
            active.set(active.get() - 1);
        });
    }
}

async fn handle(mut stream: TcpStream, shared: &Shared, prom: &PrometheusHandle) {
    let mut rb = RecvBuf::new();
    let mut fields = Vec::new();
    loop {
        let head = loop {
            match parse_request(rb.data(), 100, &mut fields) {
                Ok(Some(h)) => break Some(h),
                Ok(None) if rb.len() < 16 * 1024 => match rb.fill(&mut stream).await {
                    Ok(n) if n > 0 => {}
                    _ => return,
                },
                _ => break None,
            }
        };
        let Some(head) = head else {
            let _ = stream
                .write_all(response(400, "text/plain", b"bad request\n", true, false))
                .await;
            return;
        };
        let data = rb.data();
        let close =
            head.minor == 0 || edge_core::http::framing::connection_has(data, &fields, b"close");
        let target = &data[head.target.clone()];
        let path = target.split(|&b| b == b'?').next().unwrap_or(target);
        let method = &data[head.method.clone()];
        let (get, head_only) = (method == b"GET" || method == b"HEAD", method == b"HEAD");
        let answer =
            |status, ctype, body: &[u8], close| response(status, ctype, body, close, head_only);
        let res = match (get, path) {
            (true, b"/metrics") => {
                let mut text = prom.render();
                edge_core::latency::render(&mut text);
                answer(200, "text/plain; version=0.0.4", text.as_bytes(), close)
            }
            (true, b"/_health") if shared.ready() => answer(200, "text/plain", b"ok", close),
            (true, b"/_health") => answer(503, "text/plain", b"not ready\n", close),
            (true, b"/_live") => answer(200, "text/plain", b"ok", close),
            (true, b"/config") => {
                let text = shared.config.get().0.config.to_toml();
                answer(200, "application/toml", text.as_bytes(), close)
            }
            (true, b"/upstreams") => {
                let text = crate::process::admin_upstreams::render(shared);
                answer(200, "application/json", text.as_bytes(), close)
            }
            (false, _) => answer(405, "text/plain", b"method not allowed\n", true),
            _ => answer(404, "text/plain", b"not found\n", close),
        };
        rb.consume(head.len);
        let (r, _) = stream.write_all(res).await;
        if r.is_err() || close || !get {
            return;
        }
    }
}

fn response(status: u16, ctype: &str, body: &[u8], close: bool, head_only: bool) -> Vec<u8> {
    let mut v = Vec::with_capacity(body.len() + 160);
    crate::server::h1::answer::local(&mut v, status, ctype, body, close, false, head_only);
    v
}
