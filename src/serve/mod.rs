//! The OpenAI-compatible HTTP front door (`edgecloud-serve`), with the
//! embedders that connect it to the lanes: the local lane's
//! ([`LocalEmbedder`]) and the cloud endpoint's pass-through
//! ([`CloudEmbedder`]). Those two live here because this crate is where
//! the lanes and the front door meet; neither knows the other.

#[cfg(feature = "cloud")]
mod cloud_embeddings;
#[cfg(feature = "local")]
mod local_embeddings;

#[cfg(feature = "cloud")]
pub use cloud_embeddings::CloudEmbedder;
pub use edgecloud_serve::*;
#[cfg(feature = "local")]
pub use local_embeddings::LocalEmbedder;
