//! Devices and memory: host copies and thread placement (CUDA arrives with its own backend).

pub mod cpu;
