from sepbench.cli import main

main()
