from ray_adaptive.cli import main

main(prog_name="ray-adaptive")
