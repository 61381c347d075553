// SPDX-License-Identifier: MIT OR Apache-2.0
//! The TCP control channel: `ConnInfo`, the JSON-line messages `Msg`, connecting, listening.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::commands::bench::{rdmacm, BenchError, Op};

/// How long a side waits for a completion, a byte or a message before it calls the peer gone.
pub const PROGRESS_TIMEOUT: Duration = Duration::from_secs(20);

/// What each side tells the other about itself.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ConnInfo {
    pub qpn: u32,
    /// Every QP of the side (`--qps`), the first one is `qpn`.
    #[serde(default)]
    pub qpns: Vec<u32>,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    pub addr: u64,
    pub rkey: u32,
    pub half: u64,
    pub mem: String,
    pub reg: String,
    pub device: String,
}

/// The messages on the TCP connection (one JSON object per line).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        info: ConnInfo,
        mtu: Option<u32>,
        /// Bidirectional runs: the client opens a second connection on which the server
        /// posts the requests (roles reversed).
        #[serde(default)]
        bidir: bool,
        /// The QP is connected through librdmacm after this exchange.
        #[serde(default)]
        rdma_cm: bool,
    },
    Run {
        op: Op,
        size: u64,
        iters: u64,
        latency: bool,
        validate: bool,
        /// The server posts the same run on the second connection at the same time.
        #[serde(default)]
        bidir: bool,
    },
    /// Bidirectional runs: what the server measured as the requester of the second
    /// connection (sent after the `Result` of the client's run).
    Reverse {
        iters: u64,
        elapsed_ns: u64,
        completions_ns: Vec<u64>,
        verified_bytes: u64,
        error: Option<String>,
        /// The error is a data mismatch.
        #[serde(default)]
        mismatch: bool,
    },
    Ready,
    /// Validate mode: message `seed` has been delivered; the server checks it.
    Check {
        seed: u64,
    },
    Done,
    Result {
        ok: bool,
        verified_bytes: u64,
        error: Option<String>,
    },
    Bye,
}

pub struct Channel {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// The client's CM connection of an --rdma-cm run, kept as long as the channel.
    pub(super) cm: Option<rdmacm::Cm>,
}

impl Channel {
    pub fn new(stream: TcpStream) -> Result<Self, BenchError> {
        stream.set_nodelay(true).ok();
        stream
            .set_read_timeout(Some(PROGRESS_TIMEOUT * 3))
            .map_err(|e| BenchError::Peer(format!("socket: {e}")))?;
        let writer = stream
            .try_clone()
            .map_err(|e| BenchError::Peer(format!("socket: {e}")))?;
        Ok(Self {
            reader: BufReader::new(stream),
            writer,
            cm: None,
        })
    }

    pub fn send(&mut self, m: &Msg) -> Result<(), BenchError> {
        let mut line = serde_json::to_string(m).map_err(|e| BenchError::Peer(e.to_string()))?;
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| BenchError::Peer(format!("lost the connection to the peer: {e}")))
    }

    pub fn recv(&mut self) -> Result<Msg, BenchError> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err(BenchError::PeerClosed(
                "the peer closed the connection (killed or exited)".to_owned(),
            )),
            Ok(_) => serde_json::from_str(&line)
                .map_err(|e| BenchError::Peer(format!("unexpected message from the peer: {e}"))),
            Err(e) => Err(BenchError::PeerClosed(format!(
                "lost the connection to the peer: {e}"
            ))),
        }
    }
}

pub fn connect_retry(addr: &str) -> Result<TcpStream, BenchError> {
    let t = Instant::now();
    loop {
        match TcpStream::connect(addr) {
            Ok(s) => return Ok(s),
            Err(e)
                if t.elapsed() < Duration::from_secs(15)
                    && e.kind() == std::io::ErrorKind::ConnectionRefused =>
            {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(BenchError::Peer(format!("cannot connect to {addr}: {e}"))),
        }
    }
}

/// Binds the server's listener.
pub fn listen(addr: &str) -> Result<TcpListener, BenchError> {
    TcpListener::bind(addr).map_err(|e| BenchError::Peer(format!("cannot listen on {addr}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_of_a_peer_without_the_new_fields_parse() {
        let run =
            r#"{"msg":"run","op":"write","size":8,"iters":1,"latency":false,"validate":true}"#;
        assert!(matches!(
            serde_json::from_str::<Msg>(run),
            Ok(Msg::Run { bidir: false, .. })
        ));
    }
}
