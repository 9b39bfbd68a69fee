//! kiln-cpu
