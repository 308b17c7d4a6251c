"""The running daemon (contract sections 1, 2 and 7): wiring, sockets, the live feed, the viewer.

Lives here: the daemon wired together and its start and stop order (app), the one HTTP port (http),
RFC 6455 framing (ws), the live feed's hub (hub) and its connection loop (broadcaster), Host / Origin / token
guards (guard), and the viewer (viewer, with its files in ui/). The only package that touches sockets.
May import: everything below it: kg.api, kg.agents, kg.travel, kg.memory, kg.disk, kg.core, kg.secrets.
"""
