//! The HTTP transport: a tiny_http server with worker threads, a body size cap, `GET /health`,
//! and `TCP_NODELAY` on every connection.
use std::{
    io::Read,
    net::TcpListener,
    panic::{catch_unwind, AssertUnwindSafe},
    sync::{Arc, Mutex},
    thread,
};

use super::handle_body;
use crate::ledger::Ledger;

const MAX_BODY_BYTES: u64 = 50 * 1024 * 1024;

/// Sets `TCP_NODELAY` on the listening socket; Linux copies it to every accepted connection.
/// tiny_http writes an answer's head and body separately and never sets it itself, so
/// without this every answer over one segment waited for the client's delayed ACK (~40 ms).
fn set_nodelay_inherited(listener: &TcpListener) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: a valid socket fd owned by `listener`, and a pointer to a live c_int of the
    // length passed.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn respond(request: tiny_http::Request, ledger: &Mutex<Ledger>) {
    let json_header = tiny_http::Header::from_bytes("Content-Type", "application/json").expect("static header");
    let method = request.method().clone();
    let url = request.url().to_string();
    let mut request = request;
    let response = match method {
        tiny_http::Method::Get if url == "/health" => tiny_http::Response::from_string("ok"),
        tiny_http::Method::Post => {
            let mut body = Vec::new();
            match request.as_reader().take(MAX_BODY_BYTES + 1).read_to_end(&mut body) {
                Ok(_) if body.len() as u64 > MAX_BODY_BYTES => {
                    tiny_http::Response::from_string("request body too large").with_status_code(413)
                }
                Ok(_) => match handle_body(ledger, &body) {
                    Some(text) => tiny_http::Response::from_string(text).with_header(json_header),
                    None => tiny_http::Response::from_string("").with_status_code(200),
                },
                Err(e) => tiny_http::Response::from_string(format!("could not read the request body: {e}"))
                    .with_status_code(400),
            }
        }
        _ => tiny_http::Response::from_string("Used HTTP Method is not allowed. POST JSON-RPC requests to /")
            .with_status_code(405),
    };
    let _ = request.respond(response);
}

/// A running JSON-RPC server.
pub struct RpcServer {
    server: Arc<tiny_http::Server>,
    workers: Vec<thread::JoinHandle<()>>,
    pub ledger: Arc<Mutex<Ledger>>,
}

impl RpcServer {
    /// Serves `ledger` on `listener` with `threads` worker threads.
    pub fn start(listener: TcpListener, ledger: Ledger, threads: usize) -> std::io::Result<Self> {
        set_nodelay_inherited(&listener)?;
        let server = Arc::new(
            tiny_http::Server::from_listener(listener, None).map_err(std::io::Error::other)?,
        );
        let ledger = Arc::new(Mutex::new(ledger));
        let workers = (0..threads.max(1))
            .map(|i| {
                let server = server.clone();
                let ledger = ledger.clone();
                thread::Builder::new()
                    .name(format!("rpc-{i}"))
                    .spawn(move || {
                        while let Ok(request) = server.recv() {
                            let _ = catch_unwind(AssertUnwindSafe(|| respond(request, &ledger)));
                        }
                    })
                    .expect("spawn an RPC worker thread")
            })
            .collect();
        Ok(Self { server, workers, ledger })
    }

    /// The bound address.
    pub fn local_addr(&self) -> Option<std::net::SocketAddr> {
        self.server.server_addr().to_ip()
    }

    /// Stops accepting requests and joins the workers.
    pub fn shutdown(self) {
        for _ in &self.workers {
            self.server.unblock();
        }
        for w in self.workers {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepted_connections_inherit_tcp_nodelay_from_the_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (before, _) = listener.accept().unwrap();
        assert!(!before.nodelay().unwrap(), "the kernel default is Nagle on");
        set_nodelay_inherited(&listener).unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (after, _) = listener.accept().unwrap();
        assert!(after.nodelay().unwrap());
    }
}
