from budgeter.cli import main

main()
