"""The only code that touches a Linux host: sysfs, udev, modules, driver binding, config files."""
