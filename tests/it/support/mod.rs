//! Shared test support: generated models, loopback servers, scripted backends.
#![allow(dead_code, unreachable_pub)]

pub mod cli;
pub mod http;
pub mod hub;
pub mod models;
pub mod real_model;
pub mod scripted;
