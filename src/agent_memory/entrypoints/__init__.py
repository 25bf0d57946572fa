"""Entry points: what drives the services from outside (the graph memory
processor on NATS JetStream). Each stays thin: wire formats in, service calls,
wire formats out; the rules live in the services and the domain."""
