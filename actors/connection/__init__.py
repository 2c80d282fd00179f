"""The connection worker: per TCP connection a Reader, a Writer and one Channel actor per
channel (reader.py, writer.py, channel.py), every socket of the process on one netio loop
(netio.py), and the process's own part (host.py)."""
