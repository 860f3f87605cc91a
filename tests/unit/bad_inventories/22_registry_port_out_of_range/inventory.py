# expect: device_plugin_image
hosts = ["mirror-1"]
