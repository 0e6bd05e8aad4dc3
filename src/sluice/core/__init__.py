"""Pure logic shared by every role: SCNs, events, wire framing, the buffer layout, checkpoints.

Nothing here touches a socket, a file or a clock.
"""
