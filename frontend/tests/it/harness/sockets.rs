//! Loopback socket tools for fault cases: a [`Drip`] writer, an address that refuses
//! ([`refused_addr`]) and a listener whose connects hang ([`HangingListener`]).

use std::{
    io::Write,
    net::{SocketAddr, TcpListener, TcpStream},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering},
        Arc,
    },
    thread,
    time::Duration,
};

/// Writes bytes to a socket `chunk` at a time, the first at once and then one chunk every `every`, on a
/// thread of its own, until all are written, a write fails, or the drip is stopped (or dropped).
pub struct Drip {
    stop: Arc<AtomicBool>,
    written: Arc<AtomicUsize>,
    handle: Option<thread::JoinHandle<()>>,
}

impl Drip {
    pub fn start(s: &TcpStream, bytes: Vec<u8>, chunk: usize, every: Duration) -> Drip {
        let mut w = s.try_clone().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicUsize::new(0));
        let (stop2, written2) = (stop.clone(), written.clone());
        let handle = thread::spawn(move || {
            for (i, part) in bytes.chunks(chunk.max(1)).enumerate() {
                if i > 0 {
                    thread::sleep(every);
                }
                if stop2.load(Ordering::SeqCst) || w.write_all(part).is_err() {
                    return;
                }
                written2.fetch_add(part.len(), Ordering::SeqCst);
            }
        });
        Drip {
            stop,
            written,
            handle: Some(handle),
        }
    }

    /// Bytes written so far.
    pub fn written(&self) -> usize {
        self.written.load(Ordering::SeqCst)
    }

    /// Stops dripping; returns the bytes written.
    pub fn stop(mut self) -> usize {
        self.halt();
        self.written()
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Drip {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A loopback address where nothing listens (bound, read back, closed): connects are refused.
pub fn refused_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A listener with a backlog of 0 that never accepts, its queue filled: SYNs to it are dropped and a
/// connect hangs (PLATFORM.md). Lives as long as the value.
pub struct HangingListener {
    pub addr: SocketAddr,
    _socket: socket2::Socket,
    _fillers: Vec<TcpStream>,
}

impl HangingListener {
    pub fn new() -> Self {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into())
            .unwrap();
        s.listen(0).unwrap();
        let addr = s.local_addr().unwrap().as_socket().unwrap();
        let fillers: Vec<_> = (0..4)
            .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(300)).ok())
            .collect();
        assert!(!fillers.is_empty(), "could not fill the backlog");
        HangingListener {
            addr,
            _socket: s,
            _fillers: fillers,
        }
    }
}
