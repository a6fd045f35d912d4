"""`fa-issuer`: the identity issuer, a service apart from the aggregation server (docs/issuer.md, docs/identities.md).

It admits a device against an enrolment credential (`attesters`), charges the install's quota (`quota`) and
blind-signs the device's identity-token request (`secagg.blind_rsa`, RFC 9474) over HTTP (`app`). It imports
nothing from `analytics_server` or `device_sdk`: it is its own product, run by its own operator.
"""
