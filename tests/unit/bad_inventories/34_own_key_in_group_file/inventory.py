# expect: asset_tag, asset.py
asset = ["a-1"]
