if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
