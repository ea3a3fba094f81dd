"""The lab's own engine's HTTP client where it fails: how a failed request is sorted into a
kind (`errors`), and the one failure it sends again rather than count (`resend`: a write on a
kept connection the server had already closed). Imports nothing of the engines above it."""
