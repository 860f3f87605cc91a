# expect: allow_reboot
servers = ["srv-1", "srv-2"]
