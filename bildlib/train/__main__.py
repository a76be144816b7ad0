from bildlib.train.cli import main

main()
