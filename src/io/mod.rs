//! Syscalls and `/proc` reads: everything that talks to the kernel directly rather than
//! through `std::fs`.

pub mod at;
pub mod cache;
pub mod child;
pub mod copy;
pub mod durable;
pub mod fault;
pub mod fs;
pub mod lock;
pub mod loopfs;
pub mod proc;
pub mod reflink;
pub mod residency;
pub mod splice;
pub mod throttle;
