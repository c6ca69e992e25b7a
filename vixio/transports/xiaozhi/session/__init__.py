"""One Xiaozhi session whatever carries it: the connection after hello, downlink and pacing, who the device is, device tokens."""
