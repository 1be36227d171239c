//! A real S3 server (moto) on a loopback port, for the S3 variants of the tests.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::*;

/// A moto S3 server on a loopback port with one bucket, if `moto_server` is installed. CI
/// installs it (and sets `DISKLESS_CI=1`, which turns its absence into a failure).
pub struct S3Server {
    child: Child,
    pub endpoint: String,
}

impl S3Server {
    pub fn start(bucket: &str) -> Option<S3Server> {
        let port = free_port();
        let child = match Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                assert!(std::env::var_os("DISKLESS_CI").is_none(), "moto_server is required: {e}");
                eprintln!(
                    "SKIPPED: moto_server not installed (pip install 'moto[server]'); the S3 variant did not run"
                );
                return None;
            }
        };
        let s = S3Server { child, endpoint: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(status) =
                raw_http(port, &format!("PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"))
            {
                assert!(
                    status.starts_with("HTTP/1.1 200") || status.starts_with("HTTP/1.0 200"),
                    "create bucket: {status}"
                );
                return Some(s);
            }
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn raw_http(port: u16, request: &str) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(request.as_bytes())?;
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string())
}
