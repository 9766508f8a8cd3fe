//! The HTTP/1.1 servers on loopback that stand for a platform's endpoints (external
//! validators, notification receivers): each request read whole, its signature checked
//! as a receiver would.

use hmac::{Hmac, Mac};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One request, read whole.
pub struct Request {
    /// Its path.
    pub path: String,
    head: String,
    /// Its body.
    pub body: Vec<u8>,
}

impl Request {
    /// The value of the header `name`, if sent.
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    }

    /// Whether `X-Configrollout-Signature` is the HMAC-SHA256 under `key` of
    /// `X-Configrollout-Timestamp`, a `.` and the body, as the controller signs.
    pub fn signed_with(&self, key: &[u8]) -> bool {
        let timestamp = self.header("x-configrollout-timestamp").unwrap_or_default();
        let signature = self.header("x-configrollout-signature").unwrap_or_default();
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("key");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(&self.body);
        let expected = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        !timestamp.is_empty() && signature == expected
    }
}

/// The next request on `stream` (the controller sends one per connection or reuses it),
/// or `None` once the connection ends.
pub async fn read_request(stream: &mut TcpStream) -> Option<Request> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&head).to_string();
    let path = head
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_owned();
    let mut request = Request {
        path,
        head,
        body: Vec::new(),
    };
    let length: usize = request
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    request.body = vec![0u8; length];
    stream.read_exact(&mut request.body).await.ok()?;
    Some(request)
}

/// Answers with `status` and `body` (JSON); whether the answer was sent.
pub async fn answer(stream: &mut TcpStream, status: u16, body: &str) -> bool {
    let reason = if status == 200 { "OK" } else { "Error" };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await.is_ok()
}
