//! A moto S3 server on a loopback port with one bucket, for `data-path --s3` (moto is what the
//! test suite's S3 variants use; `deploy/prereqs.sh --tests` installs it). Stopped when dropped.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

pub struct Moto {
    child: Child,
    pub endpoint: String,
}

impl Moto {
    pub fn start(bucket: &str) -> anyhow::Result<Moto> {
        let port = super::free_port()?;
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start moto_server (pip install 'moto[server]', or deploy/prereqs.sh --tests)")?;
        let moto = Moto { child, endpoint: format!("http://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match create_bucket(port, bucket) {
                Ok(status) if status.contains(" 200") => return Ok(moto),
                Ok(status) => anyhow::bail!("moto: creating bucket {bucket}: {status}"),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(200)),
                Err(e) => return Err(e).context("moto_server did not start in 30 s"),
            }
        }
    }

    /// The broker's `[storage]` section for this server.
    pub fn storage_toml(&self, bucket: &str) -> String {
        format!(
            "[storage]\nkind = \"s3\"\nbucket = \"{bucket}\"\nendpoint = \"{}\"\nallow_http = true\n\
             access_key_id = \"test\"\nsecret_access_key = \"test\"\n",
            self.endpoint
        )
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `PUT /bucket`: the status line.
fn create_bucket(port: u16, bucket: &str) -> std::io::Result<String> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(format!("PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n").as_bytes())?;
    let mut buf = [0u8; 512];
    let n = s.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default().to_string())
}
