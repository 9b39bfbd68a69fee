//! kiln-server
