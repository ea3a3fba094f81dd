"""The system under test: one Flask app, its asyncio twin, and the mock slow upstream."""
