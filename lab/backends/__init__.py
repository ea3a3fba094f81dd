"""Where the servers run: natively or in Docker containers, and the databases beside them."""
