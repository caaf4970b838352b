"""Socket helpers shared by the network services."""


def close_quietly(sock):
    """Close sock if there is one (a peer that already went away is no error); returns None to clear the field."""
    if sock is not None:
        try:
            sock.close()
        except OSError:
            pass
    return None
