"""What every request passes before and after its route: the Host/Origin guard
(guard.py), allowed browser origins and CORS (origins.py), and the access log
(access_log.py)."""
