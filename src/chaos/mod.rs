//! The chaos runner: concurrent workers on wall-clock time, with faults
//! injected into workers, the network and the server.

pub mod draws;
pub mod fault;
pub mod grid;
pub mod lease_table;
pub mod matrix;
pub(crate) mod proxy;
pub mod resp;
pub mod runner;
pub mod schedule;
