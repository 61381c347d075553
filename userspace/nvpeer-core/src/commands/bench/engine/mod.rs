// SPDX-License-Identifier: MIT OR Apache-2.0
//! The transfer engine: RC queue pairs (one, or `--qps` for bandwidth runs), QP information
//! exchanged over TCP, and the per-size runs of the client (who posts) and the server (who
//! receives, echoes and verifies).
//!
//! Each side's buffer has two halves of `half` bytes: the source half `[0, half)` that it sends,
//! writes or serves reads from, and the sink half `[half, 2*half)` that the peer writes or
//! sends into (reads land in the client's sink half too).
//!
//! Loopback runs the server in a thread of the same process, on the same device, connected
//! over 127.0.0.1: one code path for both modes.
//!
//! The parts, each with one job, listed so that each imports only parts above it (and, out of
//! the engine, `ibv`, `rdmacm` and `mem`; `rdmacm` imports `ibv`, neither imports the engine):
//! - `channel`: the TCP control channel and its messages;
//! - `validate`: payload and completion checks;
//! - `side`: one side's verbs resources, QP set-up, posting and completion waiting;
//! - `requester`: the measuring side's bandwidth and latency loops;
//! - `connect`: the requester's connection set-up and QP information exchange;
//! - `responder`: the server's side of a run and the reverse direction of bidirectional runs.

mod channel;
mod connect;
mod requester;
mod responder;
mod side;
mod validate;

pub use super::ibv::MAX_INLINE;
pub use channel::{connect_retry, listen, Channel, ConnInfo, Msg, PROGRESS_TIMEOUT};
pub use connect::{client_connect, cm_loopback_addr};
pub use requester::{client_run, Measured, RunSpec};
pub use responder::{expect_reverse, serve_client, SecondConn};
pub use side::{mtu_enum, OwnedFdGuard, Queues, Side, SideOpts, MAX_QPS};
