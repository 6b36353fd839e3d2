"""The management VM as a real host (`guest.py`) and the stand-ins for the commands inside it that
cannot run here: cloud-init, systemctl, apt-get, the guest agent and k3s, with the k3s releases'
server and installer it installs from. A stand-in command goes here in a module of its own,
run in the guest as `python -m e2e.standins.guest.MODULE` (boot.STANDINS, guest.standin_wrapper)."""
