//! A TCP proxy on 127.0.0.1 between one broker and one coordinator node, which the nemesis can
//! cut, blackhole or heal: the network faults between brokers and nodes (this kernel has no netem,
//! and iptables on loopback cannot tell one process's connections from another's).
//!
//! - `Pass`: bytes flow both ways.
//! - `Cut`: every connection is closed at once and new ones are closed as soon as they are
//!   accepted (a refused or reset connection).
//! - `Blackhole`: connections are accepted, nothing is relayed either way (bytes wait, as packets
//!   dropped and retransmitted would); on heal the flow resumes, unless the peers gave up.
//!
//! It must not look into the bytes: the proxy knows nothing of gRPC.

use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Cut,
    Blackhole,
}

pub struct Proxy {
    /// Where clients connect (`127.0.0.1:port`).
    pub addr: String,
    /// Where the proxy forwards to.
    pub upstream: String,
    mode: watch::Sender<Mode>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub async fn start(upstream: &str) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let (mode, rx) = watch::channel(Mode::Pass);
        let up = Arc::new(upstream.to_string());
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { continue };
                let (rx, up) = (rx.clone(), up.clone());
                tokio::spawn(async move {
                    let _ = relay(client, &up, rx).await;
                });
            }
        });
        Ok(Proxy { addr, upstream: upstream.to_string(), mode, task })
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        // Connections end with the sender: their mode watch reports it closed.
    }
}

/// Waits until the mode lets bytes through; `false` when the connection must close.
async fn may_pass(rx: &mut watch::Receiver<Mode>) -> bool {
    loop {
        match *rx.borrow_and_update() {
            Mode::Pass => return true,
            Mode::Cut => return false,
            Mode::Blackhole => {}
        }
        if rx.changed().await.is_err() {
            return false;
        }
    }
}

async fn relay(client: TcpStream, upstream: &str, mut rx: watch::Receiver<Mode>) -> std::io::Result<()> {
    if !may_pass(&mut rx).await {
        return Ok(());
    }
    let server = TcpStream::connect(upstream).await?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    tokio::select! {
        _ = pump(cr, sw, rx.clone()) => {}
        _ = pump(sr, cw, rx) => {}
    }
    Ok(())
}

/// Copies one direction until end of stream, an error, or a cut.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut rx: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            changed = rx.changed() => {
                if changed.is_err() || *rx.borrow() == Mode::Cut {
                    return;
                }
                continue;
            }
        };
        if !may_pass(&mut rx).await {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn echo_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut b = [0u8; 1024];
                    while let Ok(n) = s.read(&mut b).await {
                        if n == 0 || s.write_all(&b[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
        s.write_all(b"ping").await.ok()?;
        let mut b = [0u8; 4];
        match tokio::time::timeout(within, s.read_exact(&mut b)).await {
            Ok(Ok(_)) => Some(b.to_vec()),
            _ => None,
        }
    }

    #[tokio::test]
    async fn pass_blackhole_heal_and_cut() {
        let p = Proxy::start(&echo_server().await).await.unwrap();
        let mut s = TcpStream::connect(&p.addr).await.unwrap();
        assert_eq!(roundtrip(&mut s, Duration::from_secs(5)).await.unwrap(), b"ping");
        p.set(Mode::Blackhole);
        assert!(roundtrip(&mut s, Duration::from_millis(300)).await.is_none(), "a blackhole answers nothing");
        p.set(Mode::Pass);
        let mut b = [0u8; 4];
        s.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ping", "the held bytes flow after the heal");
        p.set(Mode::Cut);
        let mut b = [0u8; 4];
        assert!(matches!(s.read(&mut b).await, Ok(0) | Err(_)), "a cut closes the connection");
        let mut s2 = TcpStream::connect(&p.addr).await.unwrap();
        assert!(roundtrip(&mut s2, Duration::from_millis(500)).await.is_none());
    }
}
