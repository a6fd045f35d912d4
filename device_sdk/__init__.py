"""The device SDK: DeviceClient, local example store, task runner, fleet simulator."""
