//! Legacy HTTP+SSE (2024-11-05) client transport.
